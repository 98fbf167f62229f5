"""stratagem.tf's ops give TensorFlow's values AND dtypes.

Expected values were recorded from TensorFlow 2.21 (CPU) running the same calls
(/work/wt/tfvenv, never a test dependency); each is also TF's documented rule, named in the case.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import stratagem.tf as tf


def _plain(value):
    if isinstance(value, torch.Tensor):
        return tf.as_dtype(value.dtype).name, value.tolist()
    raise AssertionError(f"expected a torch tensor, got {type(value).__name__}")


# (case, call, TF's dtype, TF's value)
CASES = [
    # tf.constant: Python ints are int32, floats float32; numpy keeps its dtype; large ints are int64.
    ("constant int", lambda: tf.constant(1), "int32", 1),
    ("constant float", lambda: tf.constant(1.0), "float32", 1.0),
    ("constant big int", lambda: tf.constant(2**40), "int64", 2**40),
    ("constant numpy int64", lambda: tf.constant(np.array([1, 2])), "int64", [1, 2]),
    ("constant numpy float64", lambda: tf.constant(np.array([1.0])), "float64", [1.0]),
    ("constant mixed list", lambda: tf.constant([1, 2.5]), "float32", [1.0, 2.5]),
    ("constant bool", lambda: tf.constant(True), "bool", True),
    ("constant int as float", lambda: tf.constant(1, dtype=tf.float32), "float32", 1.0),
    ("constant broadcast shape", lambda: tf.constant(3, shape=[2, 2]), "int32", [[3, 3], [3, 3]]),
    # Division: truediv of int32/int64 is float64; int8 float32; floordiv rounds toward -inf.
    ("int32 divide", lambda: tf.divide(tf.constant([7, -7]), tf.constant([2, 2])), "float64", [3.5, -3.5]),
    ("int64 truediv", lambda: tf.math.truediv(tf.constant([7, -7], tf.int64), tf.constant([2, 2], tf.int64)),
     "float64", [3.5, -3.5]),
    ("int8 truediv", lambda: tf.math.truediv(tf.constant([7], tf.int8), tf.constant([2], tf.int8)), "float32", [3.5]),
    ("int floordiv", lambda: tf.math.floordiv(tf.constant([7, -7]), tf.constant([2, 2])), "int32", [3, -4]),
    ("float floordiv", lambda: tf.math.floordiv(tf.constant([7., -7.]), tf.constant([2., 2.])), "float32", [3.0, -4.0]),
    ("truncatediv", lambda: tf.truncatediv(tf.constant([7, -7]), tf.constant([2, 2])), "int32", [3, -3]),
    ("floormod", lambda: tf.math.floormod(tf.constant([7, -7]), tf.constant([3, 3])), "int32", [1, 2]),
    ("truncatemod", lambda: tf.truncatemod(tf.constant([7, -7]), tf.constant([3, 3])), "int32", [1, -1]),
    # Python operands take the tensor's dtype.
    ("float tensor + python int", lambda: tf.add(tf.constant(1.0), 1), "float32", 2.0),
    ("python int + int", lambda: tf.add(1, 2), "int32", 3),
    ("python float + int", lambda: tf.add(1.0, 2), "float32", 3.0),
    ("pow int", lambda: tf.pow(2, 3), "int32", 8),
    # argmax/argmin: int64, axis 0 when None (not flattened); output_type respected.
    ("argmax default axis", lambda: tf.argmax([[1, 3], [4, 2]]), "int64", [1, 0]),
    ("argmax axis 1", lambda: tf.argmax([[1, 3], [4, 2]], axis=1), "int64", [1, 0]),
    ("argmin int32 output", lambda: tf.argmin([[1, 3], [4, 2]], axis=1, output_type=tf.int32), "int32", [0, 1]),
    # one_hot: out-of-range (and negative) indices give all-zero rows; dtype follows on_value.
    ("one_hot out of range", lambda: tf.one_hot([0, 2, 3, -1], 3), "float32",
     [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
    ("one_hot int on/off", lambda: tf.one_hot([0, 5], 3, on_value=5, off_value=-1), "int32", [[5, -1, -1], [-1, -1, -1]]),
    ("one_hot axis 0", lambda: tf.one_hot([0, 1], 3, axis=0), "float32", [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]),
    # Builders.
    ("range", lambda: tf.range(5), "int32", [0, 1, 2, 3, 4]),
    ("range float", lambda: tf.range(1.0, 2.0, 0.5), "float32", [1.0, 1.5]),
    ("range step", lambda: tf.range(1, 5, 2), "int32", [1, 3]),
    ("zeros", lambda: tf.zeros([2]), "float32", [0.0, 0.0]),
    ("ones int32", lambda: tf.ones([2], tf.int32), "int32", [1, 1]),
    ("fill int", lambda: tf.fill([2], 7), "int32", [7, 7]),
    ("fill float", lambda: tf.fill([2], 7.0), "float32", [7.0, 7.0]),
    ("zeros_like list", lambda: tf.zeros_like([1, 2]), "int32", [0, 0]),
    ("ones_like dtype", lambda: tf.ones_like([1.0], dtype=tf.int32), "int32", [1]),
    ("shape", lambda: tf.shape(tf.zeros([2, 3])), "int32", [2, 3]),
    ("size", lambda: tf.size(tf.zeros([2, 3])), "int32", 6),
    ("rank", lambda: tf.rank(tf.zeros([2, 3])), "int32", 2),
    ("linspace", lambda: tf.linspace(0., 1., 3), "float32", [0.0, 0.5, 1.0]),
    # Reductions keep the dtype; the integer mean truncates; axis=[] reduces nothing.
    ("reduce_mean int", lambda: tf.reduce_mean([1, 2]), "int32", 1),
    ("reduce_sum keepdims", lambda: tf.reduce_sum([[1, 2], [3, 4]], axis=1, keepdims=True), "int32", [[3], [7]]),
    ("reduce_sum empty axis", lambda: tf.reduce_sum([[1, 2], [3, 4]], axis=[]), "int32", [[1, 2], [3, 4]]),
    ("reduce_max", lambda: tf.reduce_max([[1, 2], [3, 4]], axis=0), "int32", [3, 4]),
    ("reduce_any", lambda: tf.reduce_any([True, False]), "bool", True),
    ("reduce_prod", lambda: tf.reduce_prod([1., 2., 3.]), "float32", 6.0),
    ("reduce_variance (population)", lambda: tf.math.reduce_variance([1., 2., 3., 4.]), "float32", 1.25),
    ("count_nonzero", lambda: tf.math.count_nonzero([0, 1, 2]), "int64", 2),
    ("cumsum", lambda: tf.math.cumsum([1, 2, 3]), "int32", [1, 3, 6]),
    ("cumsum exclusive reverse", lambda: tf.math.cumsum([1, 2, 3], exclusive=True, reverse=True), "int32", [5, 3, 0]),
    # Comparisons and selection.
    ("equal", lambda: tf.equal([1, 2], [1, 3]), "bool", [True, False]),
    ("where coordinates", lambda: tf.where([True, False, True]), "int64", [[0], [2]]),
    ("where select", lambda: tf.where([True, False], [1, 2], [3, 4]), "int32", [1, 4]),
    # cast: floats truncate toward zero; float -> uint8 wraps modulo 256.
    ("cast float to int", lambda: tf.cast([1.7, -1.7], tf.int32), "int32", [1, -1]),
    ("cast float to bool", lambda: tf.cast([0.0, 2.0], tf.bool), "bool", [False, True]),
    ("cast float to uint8", lambda: tf.cast([300.0, -1.0], tf.uint8), "uint8", [44, 255]),
    ("round half to even", lambda: tf.round([0.5, 1.5, 2.5, -0.5]), "float32", [0.0, 2.0, 2.0, -0.0]),
    ("sign int", lambda: tf.sign([-2, 0, 3]), "int32", [-1, 0, 1]),
    ("abs int", lambda: tf.abs(tf.constant([-1])), "int32", [1]),
    ("square int", lambda: tf.square(tf.constant([-3])), "int32", [9]),
    ("divide_no_nan", lambda: tf.math.divide_no_nan(tf.constant([1.0]), tf.constant([0.0])), "float32", [0.0]),
    ("top_k indices", lambda: tf.math.top_k([1, 3, 2], k=2).indices, "int32", [1, 2]),
    ("top_k values", lambda: tf.math.top_k([1, 3, 2], k=2).values, "int32", [3, 2]),
    ("in_top_k", lambda: tf.math.in_top_k(targets=[1, 0], predictions=[[0.1, 0.9], [0.8, 0.2]], k=1), "bool",
     [True, True]),
    ("confusion_matrix", lambda: tf.math.confusion_matrix([0, 1], [1, 1]), "int32", [[0, 1], [0, 1]]),
    # Shape ops.
    ("gather", lambda: tf.gather([[1, 2], [3, 4]], [1, 0]), "int32", [[3, 4], [1, 2]]),
    ("gather axis 1", lambda: tf.gather([[1, 2], [3, 4]], [1], axis=1), "int32", [[2], [4]]),
    ("squeeze", lambda: tf.squeeze(tf.zeros([1, 2, 1])), "float32", [0.0, 0.0]),
    ("tile", lambda: tf.tile([[1, 2]], [2, 2]), "int32", [[1, 2, 1, 2], [1, 2, 1, 2]]),
    ("stack axis 1", lambda: tf.stack([[1, 2], [3, 4]], axis=1), "int32", [[1, 3], [2, 4]]),
    ("unstack", lambda: tf.unstack(tf.constant([[1, 2], [3, 4]]))[0], "int32", [1, 2]),
    ("concat", lambda: tf.concat([[1], [2]], 0), "int32", [1, 2]),
    ("reshape -1", lambda: tf.reshape([1, 2, 3, 4], [2, -1]), "int32", [[1, 2], [3, 4]]),
    ("expand_dims", lambda: tf.expand_dims([1, 2], -1), "int32", [[1], [2]]),
    ("transpose", lambda: tf.transpose([[1, 2]]), "int32", [[1], [2]]),
    ("boolean_mask", lambda: tf.boolean_mask([1, 2, 3], [True, False, True]), "int32", [1, 3]),
    ("sort descending", lambda: tf.sort([3, 1, 2], direction="DESCENDING"), "int32", [3, 2, 1]),
    ("argsort (int32)", lambda: tf.argsort([3, 1, 2]), "int32", [1, 2, 0]),
    ("unique in first-seen order", lambda: tf.unique([3, 1, 3, 2]).y, "int32", [3, 1, 2]),
    ("pad", lambda: tf.pad([[1]], [[1, 0], [0, 1]]), "int32", [[0, 0], [1, 0]]),
    ("split", lambda: tf.split([1, 2, 3, 4], 2)[1], "int32", [3, 4]),
    ("slice", lambda: tf.slice([1, 2, 3, 4], [1], [2]), "int32", [2, 3]),
    ("identity", lambda: tf.identity([1, 2]), "int32", [1, 2]),
    # Clipping and products.
    ("clip_by_value", lambda: tf.clip_by_value([1., 5., -2.], 0., 3.), "float32", [1.0, 3.0, 0.0]),
    ("clip_by_global_norm norm", lambda: tf.clip_by_global_norm([tf.constant([3., 4.]), tf.constant([0., 12.])],
                                                                 6.5)[1], "float32", 13.0),
    ("clip_by_global_norm clipped", lambda: tf.clip_by_global_norm([tf.constant([3., 4.]), tf.constant([0., 12.])],
                                                                    6.5)[0][1], "float32", [0.0, 6.0]),
    ("matmul", lambda: tf.matmul([[1., 2.]], [[3.], [4.]]), "float32", [[11.0]]),
    ("matmul transpose_b", lambda: tf.matmul([[1., 2.]], [[3., 4.]], transpose_b=True), "float32", [[11.0]]),
    ("matmul int", lambda: tf.matmul([[1, 2]], [[3], [4]]), "int32", [[11]]),
    ("add_n", lambda: tf.add_n([[1, 2], [3, 4]]), "int32", [4, 6]),
    ("norm", lambda: tf.norm([3., 4.]), "float32", 5.0),
    # tf.nn, against TF's formulas.
    ("relu int", lambda: tf.nn.relu([-1, 2]), "int32", [0, 2]),
    ("l2_loss = sum(t**2)/2", lambda: tf.nn.l2_loss([3., 4.]), "float32", 12.5),
    ("compute_average_loss", lambda: tf.nn.compute_average_loss(tf.constant([1., 2., 3.]), global_batch_size=6),
     "float32", 1.0),
    ("scale_regularization_loss (1 replica)", lambda: tf.nn.scale_regularization_loss(6.0), "float32", 6.0),
    ("random.uniform int", lambda: tf.random.uniform([2], 0, 1, dtype=tf.int32), "int32", [0, 0]),
]


@pytest.mark.parametrize(("case", "call", "dtype", "value"), CASES, ids=[c[0] for c in CASES])
def test_op_matches_tensorflow(case, call, dtype, value):
    assert _plain(call()) == (dtype, value)


# Float results compared with a tolerance: (call, TF's float32 values).
CLOSE_CASES = [
    ("softmax", lambda: tf.nn.softmax([1., 2.]), [0.2689414322376251, 0.7310585379600525]),
    ("log_softmax", lambda: tf.nn.log_softmax([1., 2.]), [-1.31326162815094, -0.31326165795326233]),
    ("sparse_softmax_cross_entropy_with_logits",
     lambda: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[1, 0], logits=[[1., 2.], [3., 1.]]),
     [0.31326165795326233, 0.12692804634571075]),
    ("softmax_cross_entropy_with_logits",
     lambda: tf.nn.softmax_cross_entropy_with_logits(labels=[[0., 1.], [0.5, 0.5]], logits=[[1., 2.], [3., 1.]]),
     [0.31326165795326233, 1.1269280910491943]),
    ("sigmoid_cross_entropy_with_logits",
     lambda: tf.nn.sigmoid_cross_entropy_with_logits(labels=[1., 0.], logits=[0.5, -1.]),
     [0.4740769863128662, 0.3132616877555847]),
    ("reduce_logsumexp", lambda: tf.reduce_logsumexp([1., 2., 3.]), 3.4076058864593506),
    ("reduce_std", lambda: tf.math.reduce_std([1., 2., 3., 4.]), 1.1180340051651),
    ("moments variance", lambda: tf.nn.moments(tf.constant([1., 2., 3.]), axes=[0])[1], 0.6666666865348816),
]


@pytest.mark.parametrize(("case", "call", "value"), CLOSE_CASES, ids=[c[0] for c in CLOSE_CASES])
def test_float_op_matches_tensorflow(case, call, value):
    result = call()
    assert result.dtype == torch.float32
    torch.testing.assert_close(result, torch.tensor(value), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("case", "call"), [
    ("add int32 + float32", lambda: tf.add(tf.constant(1), tf.constant(1.0))),
    ("multiply float32 * float64", lambda: tf.multiply(tf.constant(1.0), tf.constant(1.0, tf.float64))),
    ("equal int32 vs float32", lambda: tf.equal(tf.constant([1, 2]), tf.constant([1., 3.]))),
    ("concat int32 and float32", lambda: tf.concat([tf.constant([1]), tf.constant([2.])], 0)),
    ("int tensor + lossy python float", lambda: tf.add(tf.constant(1), 1.5)),
    ("clip int by float bound", lambda: tf.clip_by_value(tf.constant([1, 5]), 0., 3.)),
    ("maximum int with 2.0", lambda: tf.maximum(tf.constant(1), 2.0)),
    ("constant 1.5 as int32", lambda: tf.constant(1.5, dtype=tf.int32)),
    ("sqrt of int", lambda: tf.sqrt(tf.constant(4))),
    ("exp of int", lambda: tf.exp(tf.constant(1))),
    ("reduce_sum of bool", lambda: tf.reduce_sum([True, False])),
    ("reduce_mean of bool", lambda: tf.reduce_mean(tf.constant([True, False]))),
])
def test_mixed_or_unsupported_dtypes_raise_as_in_tensorflow(case, call):
    # TF raises (InvalidArgumentError or TypeError) on each of these; it never promotes implicitly.
    with pytest.raises(TypeError):
        call()


def test_dtype_error_names_the_fix():
    with pytest.raises(TypeError, match=r"tf\.cast.*Received: dtypes int32 and float32"):
        tf.add(tf.constant(1), tf.constant(1.0))


@pytest.mark.parametrize(("case", "call"), [
    ("gather out of range", lambda: tf.gather([1, 2], [5])),
    ("squeeze a non-1 axis", lambda: tf.squeeze(tf.zeros([1, 2, 1]), axis=1)),
    ("integer to a negative power", lambda: tf.pow(2, -1)),
    ("integer uniform without maxval", lambda: tf.random.uniform([2], dtype=tf.int32)),
])
def test_invalid_arguments_raise_as_in_tensorflow(case, call):
    with pytest.raises((ValueError, IndexError, RuntimeError)):
        call()


def test_strings_are_bytes_as_in_stratagem_data():
    assert tf.constant("a") == b"a"
    assert tf.constant(["a", "b"]).tolist() == [b"a", b"b"]


def test_newaxis_indexes_like_none():
    assert tf.newaxis is None
    assert tf.zeros([2])[:, tf.newaxis].shape == (2, 1)


def test_random_ops_are_seeded_by_set_seed_and_op_seeds_continue_a_sequence():
    tf.random.set_seed(7)
    first = tf.random.normal([3])
    tf.random.set_seed(7)
    assert torch.equal(first, tf.random.normal([3]))
    assert tf.random.normal([2], dtype=tf.float64).dtype == torch.float64
    a, b = tf.random.uniform([4], seed=123), tf.random.uniform([4], seed=123)
    assert not torch.equal(a, b)  # TF: a seeded op gives the next values of its sequence on each call
    uniform = tf.random.uniform([1000], minval=2.0, maxval=3.0)
    assert uniform.dtype == torch.float32 and 2.0 <= float(uniform.min()) and float(uniform.max()) < 3.0
    assert math.isclose(float(uniform.mean()), 2.5, abs_tol=0.05)
