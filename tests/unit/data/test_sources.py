"""Sources: from_tensor_slices, from_tensors, range, from_generator (tf.data semantics, state round trips)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from stratagem.data import Dataset
from stratagem.data._structure import gather_rows
from stratagem.testing.data import assert_checkpoint_roundtrip
from tests.unit.data._helpers import as_python, python_values




# ---- from_tensor_slices -------------------------------------------------------------
def test_tensor_slices_of_tuple_yields_tuples_of_rows() -> None:
    ds = Dataset.from_tensor_slices((np.array([1, 2, 3]), np.array([[4, 5], [6, 7], [8, 9]])))
    assert python_values(ds) == [(1, (4, 5)), (2, (6, 7)), (3, (8, 9))]
    assert all(isinstance(element, tuple) for element in ds)
    assert_checkpoint_roundtrip(ds)


def test_tensor_slices_of_dict_yields_dicts_of_rows() -> None:
    ds = Dataset.from_tensor_slices({"a": np.array([1, 2]), "b": np.array([[1.0, 2.0], [3.0, 4.0]])})
    assert python_values(ds) == [{"a": 1, "b": (1.0, 2.0)}, {"a": 2, "b": (3.0, 4.0)}]
    assert_checkpoint_roundtrip(ds)


def test_tensor_slices_of_torch_tensors_yields_tensors() -> None:
    ds = Dataset.from_tensor_slices((torch.arange(3), torch.ones(3, 2)))
    elements = list(ds)
    assert all(isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) for x, y in elements)
    assert [(int(x), y.tolist()) for x, y in elements] == [(0, [1.0, 1.0]), (1, [1.0, 1.0]), (2, [1.0, 1.0])]
    assert isinstance(next(iter(ds.batch(2)))[0], torch.Tensor)
    assert_checkpoint_roundtrip(ds)


def test_tensor_slices_of_python_list_slices_the_list() -> None:
    # tf.data treats a list as one tensor, not as a structure of components.
    assert python_values(Dataset.from_tensor_slices([1, 2, 3])) == [1, 2, 3]
    assert python_values(Dataset.from_tensor_slices([[1, 2], [3, 4]])) == [(1, 2), (3, 4)]
    assert python_values(Dataset.from_tensor_slices(([1, 2], ["a", "b"]))) == [(1, b"a"), (2, b"b")]  # tf.string: bytes


def test_tensor_slices_with_different_first_dimensions_raises_value_error() -> None:
    with pytest.raises(ValueError, match=r"same first dimension.*\[3, 2\]"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(2)))


def test_tensor_slices_of_scalar_raises_value_error() -> None:
    with pytest.raises(ValueError, match="at least one axis"):
        Dataset.from_tensor_slices(np.float32(1.0))


def test_tensor_slices_batch_gathers_rows_with_one_index() -> None:
    ds = Dataset.from_tensor_slices({"x": np.arange(5)}).batch(2)
    assert [as_python(b) for b in ds] == [{"x": (0, 1)}, {"x": (2, 3)}, {"x": (4,)}]


# ---- from_tensors ---------------------------------------------------------------------
_IMAGES = np.random.default_rng(0).integers(0, 256, size=(50, 28, 28), dtype=np.uint8)
_READ_ONLY = _IMAGES.copy()
_READ_ONLY.flags.writeable = False


@pytest.mark.parametrize("leaf", [
    _IMAGES, _IMAGES.astype(np.float64), _IMAGES.astype(np.uint16), _IMAGES[::-1], _READ_ONLY,
    np.arange(50, dtype=np.int64), np.arange(100, dtype=np.float32).reshape(50, 2),
    torch.from_numpy(_IMAGES.astype(np.float32)), torch.arange(50),
], ids=["uint8", "float64", "uint16", "negative_strides", "read_only", "int64_rows", "small_rows", "tensor",
        "tensor_1d"])
def test_gather_rows_gives_fancy_indexings_values_and_types(leaf: Any) -> None:
    rows = np.array([7, 0, 49, 7, 3], dtype=np.int64)
    expected = leaf[torch.from_numpy(rows)] if isinstance(leaf, torch.Tensor) else leaf[rows]
    (got,) = gather_rows((leaf,), rows)
    assert type(got) is type(expected) and got.dtype == expected.dtype and got.shape == expected.shape
    assert bool((got == expected).all())
    assert got.flags.writeable if isinstance(got, np.ndarray) else got.is_contiguous()


def test_gather_rows_out_of_range_raises_index_error() -> None:
    with pytest.raises(IndexError):
        gather_rows(_IMAGES, np.array([50], dtype=np.int64))


# One-channel NCHW images made from NHWC by a transpose (what a channels_first Keras model is fed): numpy calls
# the array C-contiguous, but its strides are channels-last, and torch's conv and max-pool pick their kernels by them.
_NCHW_FROM_NHWC = np.ascontiguousarray(np.random.default_rng(1).random((50, 28, 28, 1), dtype=np.float32)
                                       .transpose(0, 3, 1, 2))


def _element_strides(array: Any) -> tuple[int, ...]:
    return tuple(array.stride()) if isinstance(array, torch.Tensor) else tuple(s // array.itemsize for s in array.strides)


@pytest.mark.parametrize("leaf", [
    _NCHW_FROM_NHWC, torch.from_numpy(_NCHW_FROM_NHWC),
    torch.rand(50, 3, 8, 8).contiguous(memory_format=torch.channels_last),
    torch.rand(50, 2, 4, 4, 4).contiguous(memory_format=torch.channels_last_3d),
], ids=["numpy_one_channel", "tensor_one_channel", "channels_last", "channels_last_3d"])
def test_gather_rows_keeps_the_rows_memory_layout(leaf: Any) -> None:
    rows = np.array([7, 0, 49, 7, 3], dtype=np.int64)
    (got,) = gather_rows((leaf,), rows)
    source = torch.from_numpy(leaf) if isinstance(leaf, np.ndarray) else leaf
    expected = source[torch.from_numpy(rows)]  # torch's advanced indexing keeps the layout
    assert _element_strides(got) == tuple(expected.stride()) == tuple(source.stride())
    assert torch.equal(torch.as_tensor(got), expected)


def test_tensor_slices_batches_keep_channels_last_strides() -> None:
    batch = next(iter(Dataset.from_tensor_slices(_NCHW_FROM_NHWC).shuffle(50, seed=1).batch(8)))
    assert _element_strides(batch) == (784, 1, 28, 1)


def test_from_tensors_yields_one_whole_element() -> None:
    ds = Dataset.from_tensors(([1, 2, 3], {"k": np.float32(2.0)}))
    assert python_values(ds) == [((1, 2, 3), {"k": 2.0})]
    assert ds.cardinality() == 1
    assert_checkpoint_roundtrip(ds)


def test_from_tensors_of_list_is_one_array() -> None:
    (element,) = list(Dataset.from_tensors([1, 2]))
    assert isinstance(element, np.ndarray) and element.tolist() == [1, 2]


# ---- range ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [((5,), [0, 1, 2, 3, 4]), ((2, 5), [2, 3, 4]), ((1, 10, 3), [1, 4, 7]), ((5, 0, -2), [5, 3, 1]), ((0,), [])],
)
def test_range_arguments_yield_python_range_values(args: tuple[int, ...], expected: list[int]) -> None:
    ds = Dataset.range(*args)
    assert python_values(ds) == expected
    assert ds.cardinality() == len(expected)
    assert_checkpoint_roundtrip(ds)


def test_range_elements_are_int64_scalars() -> None:
    element = next(iter(Dataset.range(3)))
    assert np.ndim(element) == 0 and np.asarray(element).dtype == np.int64


def test_range_negative_step_batches_like_elementwise() -> None:
    assert [as_python(b) for b in Dataset.range(5, 0, -2).batch(2)] == [(5, 3), (1,)]


def test_range_zero_step_raises_value_error() -> None:
    with pytest.raises(ValueError, match="step=0"):
        Dataset.range(0, 5, 0)


def test_range_without_arguments_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Received: 0 arguments"):
        Dataset.range()


# ---- from_generator -----------------------------------------------------------------------
def test_generator_converts_python_values_to_numpy() -> None:
    ds = Dataset.from_generator(lambda: iter([(1, [1.5, 2.5]), (2, [3.5, 4.5])]))
    elements = list(ds)
    assert all(isinstance(a, np.ndarray) and isinstance(b, np.ndarray) for a, b in elements)
    assert python_values(ds) == [(1, (1.5, 2.5)), (2, (3.5, 4.5))]


def test_generator_is_called_anew_each_epoch() -> None:
    calls = []

    def gen():
        calls.append(1)
        yield from range(3)

    ds = Dataset.from_generator(gen)
    assert python_values(ds) == [0, 1, 2]
    assert python_values(ds) == [0, 1, 2]
    assert len(calls) == 2


def test_generator_restore_replays_from_a_new_call() -> None:
    calls = []

    def gen():
        calls.append(1)
        yield from range(5)

    ds = Dataset.from_generator(gen)
    iterator = iter(ds)
    next(iterator), next(iterator)
    state = iterator.get_state()
    assert state == {"num_consumed": 2}
    restored = iter(ds)
    restored.set_state(state)
    assert calls == [1]  # the restored iterator calls generator() lazily, once
    assert as_python(list(restored)) == (2, 3, 4)
    assert len(calls) == 2
    assert_checkpoint_roundtrip(ds)


def test_generator_that_yields_fewer_on_restore_raises_value_error() -> None:
    lengths = iter([5, 1])
    ds = Dataset.from_generator(lambda: iter(range(next(lengths))))
    iterator = iter(ds)
    next(iterator), next(iterator), next(iterator)
    restored = iter(ds)
    restored.set_state(iterator.get_state())
    with pytest.raises(ValueError, match="num_consumed=3, generator yielded 1"):
        next(restored)


def test_generator_output_signature_casts_and_checks_shapes() -> None:
    signature = {"x": ((None,), "float32"), "y": torch.int64}
    ds = Dataset.from_generator(lambda: iter([{"x": [1, 2], "y": 3}, {"x": [4], "y": 5}]), output_signature=signature)
    first, second = list(ds)
    assert first["x"].dtype == np.float32 and isinstance(first["y"], torch.Tensor)
    assert as_python(second) == {"x": (4.0,), "y": 5}
    bad = Dataset.from_generator(lambda: iter([[1, 2], [[1, 2]]]), output_signature=((None,), "int64"))
    with pytest.raises(ValueError, match=r"element 1 has the wrong shape.*\(1, 2\)"):
        list(bad)


def test_generator_output_signature_wrong_structure_raises_value_error() -> None:
    ds = Dataset.from_generator(lambda: iter([(1, 2, 3)]), output_signature=("int64", "int64"))
    with pytest.raises(ValueError, match="does not match output_signature"):
        list(ds)


def test_generator_output_signature_of_non_dtypes_raises_type_error() -> None:
    with pytest.raises(TypeError, match="output_signature"):
        Dataset.from_generator(lambda: iter([]), output_signature={"x": object()})


def test_generator_not_callable_raises_type_error() -> None:
    with pytest.raises(TypeError, match="generator must be a callable"):
        Dataset.from_generator([1, 2, 3])  # type: ignore[arg-type]


def test_generator_cardinality_is_unknown() -> None:
    ds = Dataset.from_generator(lambda: iter(range(3)))
    assert ds.cardinality() == -2
    with pytest.raises(TypeError, match="unknown"):
        len(ds)
