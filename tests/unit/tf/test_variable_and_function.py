"""tf.Variable is a Keras variable with TF's constructor and methods; tf.function runs the Python function."""

from __future__ import annotations

import pytest
import torch

import stratagem.tf as tf
import keras  # noqa: I001 (after stratagem, which picks Keras's torch backend)


def test_variable_dtypes_follow_tf_constant():
    assert tf.Variable(1).dtype == tf.int32
    assert tf.Variable(1.0).dtype == tf.float32
    assert tf.Variable([1.0], dtype=tf.float64).dtype == "float64"
    assert tf.Variable(1.0).dtype.name == "float32"


def test_assign_methods_update_in_place_and_return_the_variable():
    v = tf.Variable([1.0, 2.0])
    assert v.assign([3.0, 4.0]) is v
    v.assign_add([1.0, 1.0])
    v.assign_sub(tf.constant([0.5, 0.5]))
    assert v.numpy().tolist() == [3.5, 4.5]
    assert v.shape == (2,)


def test_read_value_is_a_snapshot_that_carries_gradients():
    v = tf.Variable(2.0)
    snapshot = v.read_value()
    v.assign(5.0)
    assert float(snapshot) == 2.0
    (v.read_value() * 3).backward()
    assert float(v.value.grad) == 3.0


def test_assigning_another_dtype_raises_as_in_tf():
    v = tf.Variable([1.0])
    with pytest.raises(ValueError, match="tf.cast"):
        v.assign(tf.constant([1], dtype=tf.int32))


def test_trainable_flag_and_integer_variables():
    assert tf.Variable(1.0).trainable and not tf.Variable(1.0, trainable=False).trainable
    assert not tf.Variable(1).trainable  # torch gives no gradients to integers (TF says True, never differentiates)


def test_variable_is_a_keras_variable_that_keras_optimizers_update():
    v = tf.Variable([1.0, 2.0])
    assert isinstance(v, keras.Variable)
    optimizer = keras.optimizers.SGD(learning_rate=0.5)
    optimizer.apply_gradients([(torch.tensor([1.0, -2.0]), v)])
    assert v.numpy().tolist() == [0.5, 3.0]  # v - lr * g


def test_torch_and_tf_ops_take_a_variable():
    v = tf.Variable([[1.0, 2.0]])
    assert tf.matmul(v, tf.constant([[1.0], [1.0]])).tolist() == [[3.0]]
    assert torch.sum(v).item() == 3.0
    assert tf.reduce_sum(v * 2).item() == 6.0


def test_function_runs_the_python_function_with_or_without_arguments():
    calls = []

    @tf.function
    def plain(x):
        calls.append(x)
        return x * 2

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)], jit_compile=True, reduce_retracing=True)
    def signed(x):
        return x + 1

    assert plain(tf.constant(3)).item() == 6 and plain(tf.constant(4)).item() == 8
    assert len(calls) == 2  # runs every call (TF traces once; side effects differ, results do not)
    assert signed(tf.constant([1.0])).tolist() == [2.0]
    with pytest.raises(TypeError, match="input_signature"):
        signed(tf.constant([[1.0]]))
    assert tf.function(lambda: 5)() == 5


def test_function_as_a_method():
    class Model:
        scale = 3

        @tf.function
        def apply(self, x):
            return x * self.scale

    assert Model().apply(tf.constant(2)).item() == 6


def test_py_function_and_numpy_function_convert_to_tout():
    assert tf.py_function(lambda x: x + 1, [tf.constant(1)], tf.float32).dtype == torch.float32
    out = tf.numpy_function(lambda x: x * 2.5, [tf.constant([2.0])], tf.float32)
    assert out.dtype == torch.float32 and out.tolist() == [5.0]
