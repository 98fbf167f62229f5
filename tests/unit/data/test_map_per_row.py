"""Map vectorisation by default, sound by construction: a per-element ``map`` followed by ``batch`` (or a filling
``cache``) runs once per batch under ``torch.func.vmap`` where that gives the same elements, else per element.

Every test compares the pipeline's batches with the same map computed one element at a time
(``map_vectorization=False``), exactly: structure, leaf types, dtypes, shapes, values and order.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch

import stratagem.tf as tf
import keras  # noqa: I001 (after stratagem, which picks the torch backend; imported at collection: it sets
#               TF_FORCE_GPU_ALLOW_GROWTH in os.environ)
from stratagem.data import AUTOTUNE, Dataset, Options
from stratagem.data._structure import same_elements


def seed_preprocessing(img: Any, label: Any) -> tuple[Any, Any]:
    """Seed 000's function as its TF script writes it, through stratagem.tf."""
    img = tf.cast(img, tf.float64)
    img = img / 255.0
    img = tf.expand_dims(img, axis=-1)
    label = tf.one_hot(label, 10, dtype=tf.int32)
    return img, label


def _images(n: int, *, as_tensors: bool = False) -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, size=(n, 6, 5), dtype=np.uint8), rng.integers(0, 10, size=n)
    return (torch.from_numpy(x), torch.from_numpy(y)) if as_tensors else (x, y)


def _per_element(dataset: Dataset) -> Dataset:
    options = Options()
    options.experimental_optimization.map_vectorization = False
    return dataset.with_options(options)


def _assert_same_batches(got: list[Any], expected: list[Any]) -> None:
    assert len(got) == len(expected)
    for index, (batch, reference) in enumerate(zip(got, expected)):
        assert same_elements(batch, reference), f"batch {index} differs"


class _Calls:
    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.fn(*args)


@pytest.mark.parametrize("num_parallel_calls", [None, AUTOTUNE])
def test_seed_function_through_stratagem_tf_runs_once_per_batch_with_the_same_elements(num_parallel_calls: Any) -> None:
    x, y = _images(300)
    counted = _Calls(seed_preprocessing)
    mapped = Dataset.from_tensor_slices((x, y)).map(counted, num_parallel_calls=num_parallel_calls)
    got = list(mapped.batch(32))
    assert mapped._row_calls is True and mapped._pool is None  # no worker pool started either
    assert counted.calls == 10 + 1  # a call per batch, and element 0 alone once (row 0's check)
    expected = list(_per_element(Dataset.from_tensor_slices((x, y)).map(seed_preprocessing).batch(32)))
    _assert_same_batches(got, expected)
    assert got[0][0].dtype == torch.float64 and got[0][1].dtype == torch.int32


def test_seed_chain_with_cache_and_shuffle_gives_the_per_element_order_and_values() -> None:
    x, y = _images(3000)  # several cache fill chunks


    def chain() -> Dataset:  # a new pipeline each time: a cache filled by one is never read by the other
        return (Dataset.from_tensor_slices((x, y)).map(seed_preprocessing, num_parallel_calls=AUTOTUNE).cache()
                .shuffle(1000, seed=4).batch(64).prefetch(AUTOTUNE))

    vectorised = list(chain().iterator(seed=0))
    _assert_same_batches(vectorised, list(_per_element(chain()).iterator(seed=0)))


def test_keras_ops_on_tensor_elements_run_under_vmap() -> None:

    def keras_preprocessing(img: Any, label: Any) -> tuple[Any, Any]:
        img = keras.ops.cast(img, "float64") / 255.0
        return keras.ops.expand_dims(img, -1), keras.ops.one_hot(label, 10, dtype="int32")

    x, y = _images(200, as_tensors=True)
    mapped = Dataset.from_tensor_slices((x, y)).map(keras_preprocessing)
    got = list(mapped.batch(16))
    assert mapped._row_calls is True
    _assert_same_batches(got, list(_per_element(Dataset.from_tensor_slices((x, y)).map(keras_preprocessing).batch(16))))


def _branches_on_a_value(img: Any, label: Any) -> tuple[Any, Any]:
    """Zeroes the image where the label is 5 or more: Python branching on a tensor's value."""
    return (tf.cast(img, tf.float32) * 0.0 if label >= 5 else tf.cast(img, tf.float32)), tf.cast(label, tf.int64)


def _reduces_over_the_element(img: Any, label: Any) -> tuple[Any, Any]:
    """Zeroes the image where the label is 5 or more, through a reduction: on a plain batch call the reduction
    would cover the whole batch (every row zeroed once any label is 5 or more)."""
    keep = tf.cast(tf.reduce_max(tf.reshape(label, [-1])) < 5, tf.float32)
    return tf.cast(img, tf.float32) * keep, tf.cast(label, tf.int64)


@pytest.mark.parametrize("fn, vmapped", [(_branches_on_a_value, False), (_reduces_over_the_element, True)])
def test_map_differing_only_on_row_7_of_batch_3_gives_per_element_results(fn: Any, vmapped: bool) -> None:
    x, y = _images(200)
    y[:] = np.arange(200) % 5  # every label below 5: a plain batch call agrees with per-element calls ...
    y[3 * 16 + 7] = 9  # ... except on row 7 of batch 3, which per element alone is zeroed
    mapped = Dataset.from_tensor_slices((x, y)).map(fn)
    got = list(mapped.batch(16))
    assert mapped._row_calls is vmapped  # the branch raises under vmap; the reduction is per row there
    expected = list(_per_element(Dataset.from_tensor_slices((x, y)).map(fn).batch(16)))
    _assert_same_batches(got, expected)
    assert not torch.any(got[3][0][7]) and torch.all(got[3][0][[6, 8]].flatten(1).any(dim=1))
    if vmapped:  # what a sampled check (first batch, first and last rows of the others) misses: the plain call
        plain = fn(torch.from_numpy(x[48:64]), torch.from_numpy(y[48:64]))[0]
        assert not torch.any(plain) and torch.all(got[3][0][[0, 6, 8, 15]].flatten(1).any(dim=1))


def _to_numpy(img: Any, label: Any) -> tuple[Any, Any]:
    return np.asarray(tf.cast(img, tf.float32)) * 2.0, label


def _item(img: Any, label: Any) -> tuple[Any, Any]:
    return tf.cast(img, tf.float32) * float(tf.reduce_sum(tf.cast(label, tf.float32))), label


def _torch_random(img: Any, label: Any) -> tuple[Any, Any]:
    return tf.cast(img, tf.float32) + tf.random.uniform([6, 5]), label


def _python_random(img: Any, label: Any) -> tuple[Any, Any]:
    return tf.cast(img, tf.float32) * random.random(), label


def _numpy_random(img: Any, label: Any) -> tuple[Any, Any]:
    return tf.cast(img, tf.float32) * float(np.random.uniform()), label


def _numpy_function(img: Any, label: Any) -> tuple[Any, Any]:
    return np.expand_dims(img.astype(np.float64) / 255.0, -1), np.eye(10, dtype=np.int32)[label]


def _operator_on_numpy_input(img: Any, label: Any) -> tuple[Any, Any]:
    """``img / 255.`` is float64 on a numpy element and float32 on a tensor: the cast hides the difference."""
    return tf.cast(img / 255.0, tf.float32), label


def _keras_op_on_numpy_input(img: Any, label: Any) -> tuple[Any, Any]:
    return keras.ops.cast(img, "float32"), label


def _returns_its_input(img: Any, label: Any) -> tuple[Any, Any]:
    return img, label


def _asks_for_numpy(img: Any, label: Any) -> tuple[Any, Any]:
    """Python's isinstance has no hook: only the comparison of element 0 with row 0 sees this one."""
    return tf.cast(img, tf.float32) * (2.0 if isinstance(img, np.ndarray) else 1.0), label


@pytest.mark.parametrize("fn", [_to_numpy, _item, _torch_random, _python_random, _numpy_random, _numpy_function,
                                _operator_on_numpy_input, _keras_op_on_numpy_input, _returns_its_input,
                                _asks_for_numpy])
def test_functions_vmap_cannot_show_per_row_are_computed_per_element(fn: Any) -> None:
    x, y = _images(100)
    random.seed(5)
    np.random.seed(5)
    mapped = Dataset.from_tensor_slices((x, y)).map(fn)
    got = list(mapped.batch(10))
    assert mapped._row_calls is False
    random.seed(5)
    np.random.seed(5)
    if fn is _torch_random:  # fresh draws per element either way: compare what is not random
        expected = list(_per_element(Dataset.from_tensor_slices((x, y)).map(fn).batch(10)))
        assert [tuple(b[0].shape) for b in got] == [tuple(b[0].shape) for b in expected]
        return
    _assert_same_batches(got, list(_per_element(Dataset.from_tensor_slices((x, y)).map(fn).batch(10))))


def test_string_elements_are_computed_per_element() -> None:
    words = np.array([b"a", b"bb", b"ccc", b"dddd"] * 5)
    mapped = Dataset.from_tensor_slices(words).map(lambda w: tf.strings.length(w))
    got = list(mapped.batch(4))
    assert mapped._row_calls is not True
    assert [b.tolist() for b in got] == [[1, 2, 3, 4]] * 5


def test_map_vectorization_false_never_calls_on_a_batch() -> None:
    x, y = _images(64, as_tensors=True)
    counted = _Calls(seed_preprocessing)
    list(_per_element(Dataset.from_tensor_slices((x, y)).map(counted).batch(16)))
    assert counted.calls == 64


def test_a_real_error_raises_as_without_vectorisation() -> None:
    def lookup(index: Any) -> Any:
        return tf.gather(tf.constant([10, 20, 30]), tf.reshape(index, [1]))  # index 3 and up: out of range

    mapped = Dataset.range(6).map(lookup)
    with pytest.raises((IndexError, RuntimeError)):
        list(mapped.batch(6))


def _round_trip_by_seven(img: Any, label: Any) -> tuple[Any, Any]:
    """``img / 7.0 * 7.0`` is float64 on a numpy element (exact for every uint8) and float32 on a tensor, where 31,
    61, 62 ... come back a hair below themselves and truncate to one less."""
    return tf.cast(img / 7.0 * 7.0, tf.int32), tf.cast(label, tf.int64)


def test_users_operator_on_a_numpy_born_input_is_computed_per_element_even_where_row_0_agrees() -> None:
    x, y = _images(200)
    x[:] = 10  # every pixel exact in float32 too: row 0 of every batch agrees with the element computed alone ...
    x[3 * 16 + 7, 2, 3] = 31  # ... except one pixel of row 7 of batch 3
    mapped = Dataset.from_tensor_slices((x, y)).map(_round_trip_by_seven)
    got = list(mapped.batch(16))
    assert mapped._row_calls is False  # the guard: `/` on the raw input in the user's code, not a stratagem.tf op
    _assert_same_batches(got, list(_per_element(Dataset.from_tensor_slices((x, y)).map(_round_trip_by_seven).batch(16))))
    assert int(got[3][0][7, 2, 3]) == 31
    # Under vmap without the guard that pixel would be 30:
    assert int(tf.cast(torch.from_numpy(x[55]) / 7.0 * 7.0, tf.int32)[2, 3]) == 30
