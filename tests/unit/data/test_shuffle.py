"""shuffle: a permutation over random-access inputs, tf.data's buffer over streaming ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from stratagem.data import Dataset
from stratagem.data.ops.shuffle import BufferShuffleDataset, PermutationShuffleDataset
from stratagem.testing.data import assert_checkpoint_roundtrip


def _values(iterable: Any) -> list[int]:
    return [int(x) for x in iterable]


def _gen(n: int) -> Dataset:
    return Dataset.from_generator(lambda: iter(range(n)))


@pytest.fixture(params=["permutation", "buffer"])
def source(request: pytest.FixtureRequest) -> Callable[[], Dataset]:
    """Builds 0..19 as a random-access input (permutation shuffle) or a streaming one (buffer shuffle)."""
    return (lambda: Dataset.range(20)) if request.param == "permutation" else (lambda: _gen(20))


def test_random_access_input_uses_permutation_and_streaming_uses_buffer() -> None:
    assert isinstance(Dataset.range(5).shuffle(2), PermutationShuffleDataset)
    assert isinstance(_gen(5).shuffle(2), BufferShuffleDataset)
    assert isinstance(Dataset.range(5).repeat().shuffle(2), BufferShuffleDataset)


def test_shuffle_yields_every_element_exactly_once_per_epoch(source: Callable[[], Dataset]) -> None:
    ds = source().shuffle(8, seed=1)
    for _ in range(3):
        values = _values(ds)
        assert sorted(values) == list(range(20))
    assert values != list(range(20))


def test_shuffle_same_seed_gives_same_order(source: Callable[[], Dataset]) -> None:
    a = _values(source().shuffle(8, seed=5).iterator(epoch=0))
    b = _values(source().shuffle(8, seed=5).iterator(epoch=0))
    c = _values(source().shuffle(8, seed=6).iterator(epoch=0))
    assert a == b
    assert a != c


def test_unseeded_shuffle_follows_iterator_seed(source: Callable[[], Dataset]) -> None:
    ds = source().shuffle(8)
    assert _values(ds.iterator(seed=3, epoch=0)) == _values(ds.iterator(seed=3, epoch=0))
    assert _values(ds.iterator(seed=3, epoch=0)) != _values(ds.iterator(seed=4, epoch=0))


def test_reshuffle_each_iteration_true_differs_between_epochs(source: Callable[[], Dataset]) -> None:
    ds = source().shuffle(8, seed=2, reshuffle_each_iteration=True)
    first, second = _values(iter(ds)), _values(iter(ds))
    assert first != second
    assert sorted(first) == sorted(second) == list(range(20))


def test_reshuffle_each_iteration_false_repeats_the_order(source: Callable[[], Dataset]) -> None:
    ds = source().shuffle(8, seed=2, reshuffle_each_iteration=False)
    first, second = _values(iter(ds)), _values(iter(ds))
    assert first == second
    assert first != list(range(20))


def test_shuffle_round_trips(source: Callable[[], Dataset]) -> None:
    assert_checkpoint_roundtrip(source().take(10).shuffle(4, seed=9))
    assert_checkpoint_roundtrip(source().take(10).shuffle(4))  # unseeded: the state carries the iterator's seed


def test_buffer_shuffle_draws_from_the_first_buffer_size_elements() -> None:
    # tf.data semantics: the first output is one of the first buffer_size input elements.
    firsts = {_values(_gen(10).shuffle(2, seed=seed).iterator(epoch=0))[0] for seed in range(20)}
    assert firsts == {0, 1}


def test_buffer_shuffle_of_size_one_keeps_order() -> None:
    assert _values(_gen(6).shuffle(1, seed=0)) == [0, 1, 2, 3, 4, 5]


def test_buffer_larger_than_input_is_a_full_shuffle() -> None:
    values = _values(_gen(5).shuffle(100, seed=4))
    assert sorted(values) == [0, 1, 2, 3, 4]


def test_permutation_shuffle_of_structured_elements_keeps_pairs_together() -> None:
    ds = Dataset.from_tensor_slices((np.arange(6), np.arange(6) * 10)).shuffle(6, seed=0)
    pairs = [(int(a), int(b)) for a, b in ds]
    assert all(b == a * 10 for a, b in pairs)
    assert sorted(a for a, _ in pairs) == list(range(6))


def test_permutation_shuffle_batches_hold_its_elements_in_order() -> None:
    shuffled = Dataset.range(20).shuffle(20, seed=3)
    elements = [int(x) for x in shuffled]
    batches = [[int(x) for x in batch] for batch in shuffled.batch(3)]  # a batch fetches a range of positions
    assert [x for batch in batches for x in batch] == elements and elements != list(range(20))
    assert [len(batch) for batch in batches] == [3] * 6 + [2]


def test_shuffle_then_batch_round_trips() -> None:
    assert_checkpoint_roundtrip(Dataset.range(10).shuffle(10, seed=1).batch(3))
    assert_checkpoint_roundtrip(_gen(10).shuffle(3, seed=1).batch(3))


@pytest.mark.parametrize("buffer_size", [0, -5])
def test_non_positive_buffer_size_raises_value_error(buffer_size: int) -> None:
    with pytest.raises(ValueError, match=f"buffer_size={buffer_size}"):
        Dataset.range(3).shuffle(buffer_size)


def test_shuffle_cardinality_follows_input() -> None:
    assert Dataset.range(7).shuffle(3).cardinality() == 7
    assert _gen(7).shuffle(3).cardinality() == -2
