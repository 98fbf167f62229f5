"""batch, padded_batch and unbatch: tf.data's documented results, errors, state round trips."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from stratagem.data import Dataset
from stratagem.testing.data import assert_checkpoint_roundtrip
from tests.unit.data._helpers import as_python, python_values




def _gen(elements: list[Any]) -> Dataset:
    return Dataset.from_generator(lambda: iter(elements))


def _ragged() -> Dataset:
    """tf.data's padded_batch example: element n is [n] * n for n in 1..4."""
    return Dataset.range(1, 5).map(lambda n: np.full(int(n), n))


# ---- batch -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("drop_remainder", "expected"),
    [(False, [(0, 1, 2), (3, 4, 5), (6, 7)]), (True, [(0, 1, 2), (3, 4, 5)])],
)
def test_batch_stacks_consecutiveelements(drop_remainder: bool, expected: list[Any]) -> None:
    ds = Dataset.range(8).batch(3, drop_remainder=drop_remainder)
    assert python_values(ds) == expected
    assert ds.cardinality() == len(expected)
    streaming = _gen(list(range(8))).batch(3, drop_remainder=drop_remainder)
    assert python_values(streaming) == expected
    assert_checkpoint_roundtrip(ds)
    assert_checkpoint_roundtrip(streaming)


def test_batch_keeps_tuple_and_dict_structure() -> None:
    ds = Dataset.from_tensor_slices({"x": np.arange(4), "y": (np.arange(4) * 2, np.ones((4, 2)))}).batch(2)
    first = next(iter(ds))
    assert set(first) == {"x", "y"} and isinstance(first["y"], tuple)
    assert as_python(first) == {"x": (0, 1), "y": ((0, 2), ((1.0, 1.0), (1.0, 1.0)))}


def test_batch_of_torch_elements_is_a_torch_tensor() -> None:
    ds = Dataset.from_tensor_slices(torch.arange(5)).map(lambda x: x * 2).batch(2)
    batches = list(ds)
    assert all(isinstance(b, torch.Tensor) for b in batches)
    assert [b.tolist() for b in batches] == [[0, 2], [4, 6], [8]]


def test_batch_over_infinite_input_is_infinite() -> None:
    ds = Dataset.range(3).repeat().batch(2)
    assert ds.cardinality() == -1
    assert python_values(ds.take(3)) == [(0, 1), (2, 0), (1, 2)]


def test_batch_of_different_shapes_raises_value_error_naming_both() -> None:
    random_access = Dataset.range(1, 4).map(lambda n: np.zeros(int(n))).batch(3)
    with pytest.raises(ValueError, match=r"element 0 has shape \(1,\) but element 1 has shape \(2,\)"):
        list(random_access)
    streaming = _gen([np.zeros(2), np.zeros(2), np.zeros((2, 2))]).batch(3)
    with pytest.raises(ValueError, match=r"shapes \(2,\) and \(2, 2\) at index 2"):
        list(streaming)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_batch_invalid_size_raises_value_error(batch_size: Any) -> None:
    with pytest.raises(ValueError, match=f"batch_size={batch_size!r}"):
        Dataset.range(3).batch(batch_size)


# ---- padded_batch ----------------------------------------------------------------------------
def test_padded_batch_pads_to_longest_in_batch() -> None:
    ds = _ragged().padded_batch(2)
    assert python_values(ds) == [((1, 0), (2, 2)), ((3, 3, 3, 0), (4, 4, 4, 4))]
    assert ds.cardinality() == 2
    assert_checkpoint_roundtrip(ds)


def test_padded_batch_pads_to_fixed_shape_with_value() -> None:
    assert python_values(_ragged().padded_batch(2, padded_shapes=5)) == [
        ((1, 0, 0, 0, 0), (2, 2, 0, 0, 0)), ((3, 3, 3, 0, 0), (4, 4, 4, 4, 0))]
    assert python_values(_ragged().padded_batch(2, padded_shapes=[5], padding_values=-1)) == [
        ((1, -1, -1, -1, -1), (2, 2, -1, -1, -1)), ((3, 3, 3, -1, -1), (4, 4, 4, 4, -1))]


def test_padded_batch_tuple_components_take_own_padding_values() -> None:
    elements = [([1, 2, 3], [10]), ([4, 5], [11, 12])]
    ds = _gen(elements).padded_batch(2, padding_values=(-1, 100))
    assert python_values(ds) == [(((1, 2, 3), (4, 5, -1)), ((10, 100), (11, 12)))]
    broadcast = _gen(elements).padded_batch(2, padding_values=-1)
    assert python_values(broadcast) == [(((1, 2, 3), (4, 5, -1)), ((10, -1), (11, 12)))]
    assert_checkpoint_roundtrip(ds)


def test_padded_batch_mixes_fixed_and_unknown_dimensions() -> None:
    elements = [np.ones((1, 2)), np.ones((2, 1))]
    ds = _gen(elements).padded_batch(2, padded_shapes=[None, 3])
    (batch,) = list(ds)
    assert batch.shape == (2, 2, 3)
    assert batch.sum() == 4
    (batch,) = list(_gen(elements).padded_batch(2, padded_shapes=[-1, -1]))
    assert batch.shape == (2, 2, 2)


def test_padded_batch_of_dicts_pads_each_key() -> None:
    elements = [{"ids": [1], "label": 0}, {"ids": [2, 3], "label": 1}]
    ds = _gen(elements).padded_batch(2, padded_shapes={"ids": [3], "label": []})
    assert python_values(ds) == [{"ids": ((1, 0, 0), (2, 3, 0)), "label": (0, 1)}]


def test_padded_batch_pads_strings_with_empty_and_torch_with_zero() -> None:
    (words,) = list(_gen([np.array(["a"]), np.array(["bb", "ccc"])]).padded_batch(2))
    assert words.tolist() == [["a", ""], ["bb", "ccc"]]
    (tensors,) = list(_gen([torch.ones(1), torch.ones(3)]).padded_batch(2))
    assert isinstance(tensors, torch.Tensor) and tensors.tolist() == [[1, 0, 0], [1, 1, 1]]


def test_padded_batch_drop_remainder_drops_short_batch() -> None:
    ds = _ragged().padded_batch(3, drop_remainder=True)
    assert python_values(ds) == [((1, 0, 0), (2, 2, 0), (3, 3, 3))]
    assert ds.cardinality() == 1
    streaming = _gen([[1], [2, 2], [3]]).padded_batch(2, drop_remainder=True)
    assert python_values(streaming) == [((1, 0), (2, 2))]
    assert_checkpoint_roundtrip(streaming)


def test_padded_batch_element_larger_than_padded_shape_raises_value_error() -> None:
    with pytest.raises(ValueError, match=r"element 1 of the batch \(input element 3\) has shape \(4,\), larger than "
                                         r"the padded shape \(3,\)"):
        list(_ragged().padded_batch(2, padded_shapes=[3]))
    with pytest.raises(ValueError, match=r"element 0 of the batch has shape \(2,\).*padded shape \(1,\)"):
        list(_gen([[1, 2]]).padded_batch(2, padded_shapes=[1]))


def test_padded_batch_of_different_ranks_raises_value_error() -> None:
    with pytest.raises(ValueError, match=r"ranks 1 and 2"):
        list(_gen([np.zeros(2), np.zeros((2, 2))]).padded_batch(2))


def test_padded_batch_shape_of_wrong_rank_raises_value_error() -> None:
    with pytest.raises(ValueError, match=r"rank 1.*Received: padded_shapes=\[2, 2\]"):
        list(_ragged().padded_batch(2, padded_shapes=[2, 2]))


def test_padded_batch_invalid_size_raises_value_error() -> None:
    with pytest.raises(ValueError, match="batch_size=0"):
        _ragged().padded_batch(0)


# ---- unbatch ----------------------------------------------------------------------------------
def test_unbatch_splits_ragged_elements_into_rows() -> None:
    ds = _gen([np.array([1, 2, 3]), np.array([1, 2]), np.array([], dtype=np.int64), np.array([1, 2, 3, 4])]).unbatch()
    assert python_values(ds) == [1, 2, 3, 1, 2, 1, 2, 3, 4]
    assert ds.cardinality() == -2
    assert_checkpoint_roundtrip(ds)


def test_unbatch_inverts_batch_for_structuredelements() -> None:
    source = Dataset.from_tensor_slices((np.arange(7), {"y": np.arange(7) * 10}))
    ds = source.batch(3).unbatch()
    assert python_values(ds) == python_values(source)
    assert_checkpoint_roundtrip(ds)


def test_unbatch_state_is_parent_state_plus_row_offset() -> None:
    iterator = iter(Dataset.range(6).batch(3).unbatch())
    for _ in range(4):
        next(iterator)
    state = iterator.get_state()
    assert state["offset"] == 1 and state["parent"]["index"] == 1


def test_unbatch_components_of_different_sizes_raise_value_error() -> None:
    ds = Dataset.from_tensors((np.zeros(3), np.zeros(2))).unbatch()
    with pytest.raises(ValueError, match="component sizes 3 and 2"):
        list(ds)


def test_unbatch_scalar_component_raises_value_error() -> None:
    with pytest.raises(ValueError, match="at least one axis"):
        list(Dataset.range(3).unbatch())
