"""``Dataset.interleave``: tf.data's order, checkpointing, and the threaded producers."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import pytest

from stratagem.data import AUTOTUNE, Dataset
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops.interleave import InterleaveDataset
from stratagem.testing.data import assert_checkpoint_roundtrip

TF_EXAMPLE = [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]


def _reference(lists: list[list[int]], cycle_length: int, block_length: int) -> list[int]:
    """tf.data's reference interleave (from its interleave tests), over plain lists."""
    pending = [iter(values) for values in lists]
    slots: list[Any] = [pending.pop(0) if pending else None for _ in range(cycle_length)]
    out: list[int] = []
    while any(slot is not None for slot in slots) or pending:
        for i in range(cycle_length):
            if slots[i] is None:
                if not pending:
                    continue
                slots[i] = pending.pop(0)
            for _ in range(block_length):
                try:
                    out.append(next(slots[i]))
                except StopIteration:
                    slots[i] = None
                    break
    return out


def _ints(dataset: Dataset) -> list[int]:
    return [int(x) for x in dataset]


def _repeat_self(x: Any) -> Dataset:
    """Input ``x`` becomes ``x`` repeated ``x`` times (0 gives an empty child)."""
    return Dataset.from_tensors(x).repeat(int(x))


class _CountingStream(Dataset):
    """A streaming source of 0..n-1 that counts how many elements it produced."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.pulls = n, 0

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _CountingStreamIterator(self)


class _CountingStreamIterator(DatasetIterator):
    _POSITION = "position"

    def __init__(self, dataset: _CountingStream) -> None:
        self._dataset, self._position = dataset, 0

    def __next__(self) -> Any:
        if self._position >= self._dataset.n:
            raise StopIteration
        self._dataset.pulls += 1
        self._position += 1
        return np.int64(self._position - 1)

    def get_state(self) -> dict[str, Any]:
        return {self._POSITION: self._position}

    def set_state(self, state: dict[str, Any]) -> None:
        self._position = int(state[self._POSITION])


class _ChildFailure(Exception):
    pass


def _fail_on_seven(x: Any) -> Any:
    if int(x) == 7:
        raise _ChildFailure("element 7 is bad")
    return x


# ---- order ------------------------------------------------------------------------------
@pytest.mark.parametrize("num_parallel_calls", [None, 2])
def test_tf_documented_example_yields_tf_order(num_parallel_calls: int | None) -> None:
    ds = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2,
                                        block_length=4, num_parallel_calls=num_parallel_calls)
    assert _ints(ds) == TF_EXAMPLE


@pytest.mark.parametrize("num_parallel_calls", [None, 1, 3])
@pytest.mark.parametrize("block_length", [1, 2, 5])
@pytest.mark.parametrize("cycle_length", [1, 3, 7])
def test_cycle_and_block_variants_match_tf_reference(cycle_length: int, block_length: int,
                                                     num_parallel_calls: int | None) -> None:
    inputs = [3, 0, 1, 4, 2, 0, 5, 1]
    if num_parallel_calls is not None and num_parallel_calls > cycle_length:
        num_parallel_calls = cycle_length
    ds = Dataset.from_tensor_slices(np.array(inputs)).interleave(
        _repeat_self, cycle_length=cycle_length, block_length=block_length, num_parallel_calls=num_parallel_calls)
    assert _ints(ds) == _reference([[x] * x for x in inputs], cycle_length, block_length)


def test_cycle_length_one_yields_flat_map_order() -> None:
    ds = Dataset.range(4).interleave(lambda x: Dataset.range(x), cycle_length=1)
    assert _ints(ds) == [0, 0, 1, 0, 1, 2]


def test_default_or_autotune_cycle_length_is_cpu_count() -> None:
    assert InterleaveDataset(Dataset.range(3), _repeat_self, cycle_length=None, block_length=1,
                             num_parallel_calls=None, deterministic=None).cycle_length == (os.cpu_count() or 1)
    ds = Dataset.range(4).interleave(_repeat_self, cycle_length=AUTOTUNE, num_parallel_calls=AUTOTUNE)
    assert sorted(_ints(ds)) == [1, 2, 2, 3, 3, 3]


def test_tuple_elements_are_unpacked_into_map_func_arguments() -> None:
    pairs = Dataset.from_tensor_slices((np.array([10, 20]), np.array([1, 2])))
    ds = pairs.interleave(lambda base, count: Dataset.range(int(base), int(base) + int(count)), cycle_length=2)
    assert _ints(ds) == [10, 20, 21]


def test_nondeterministic_yields_every_element_once() -> None:
    ds = Dataset.range(1, 8).interleave(_repeat_self, cycle_length=3, block_length=2, num_parallel_calls=3,
                                        deterministic=False)
    assert sorted(_ints(ds)) == sorted(x for x in range(1, 8) for _ in range(x))


def test_children_of_unseeded_shuffles_shuffle_differently() -> None:
    ds = Dataset.range(2).interleave(lambda _: Dataset.range(50).shuffle(50), cycle_length=1)
    values = _ints(ds)
    assert sorted(values[:50]) == sorted(values[50:]) == list(range(50))
    assert values[:50] != values[50:]


# ---- arguments ----------------------------------------------------------------------------
def test_map_func_returning_non_dataset_raises_type_error_naming_type() -> None:
    ds = Dataset.range(3).interleave(lambda x: [x, x], cycle_length=2)
    with pytest.raises(TypeError, match="Received: map_func returned a value of type list"):
        next(iter(ds))


@pytest.mark.parametrize("kwargs", [{"block_length": 0}, {"cycle_length": 0}, {"num_parallel_calls": -5}])
def test_non_positive_arguments_raise_value_error(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="Received:"):
        Dataset.range(3).interleave(_repeat_self, **kwargs)


def test_more_parallel_calls_than_cycle_length_raises_value_error() -> None:
    with pytest.raises(ValueError, match="num_parallel_calls=4, cycle_length=2"):
        Dataset.range(3).interleave(_repeat_self, cycle_length=2, num_parallel_calls=4)


def test_state_with_other_cycle_length_raises_value_error() -> None:
    iterator = Dataset.range(1, 5).interleave(_repeat_self, cycle_length=2).iterator(seed=0)
    next(iterator)
    state = iterator.get_state()
    other = Dataset.range(1, 5).interleave(_repeat_self, cycle_length=3).iterator(seed=0)
    with pytest.raises(ValueError, match="cycle_length"):
        other.set_state(state)


# ---- checkpointing ------------------------------------------------------------------------
@pytest.mark.parametrize("num_parallel_calls", [None, 2])
def test_tf_example_checkpoint_roundtrip_restores_every_position(num_parallel_calls: int | None) -> None:
    ds = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2,
                                        block_length=4, num_parallel_calls=num_parallel_calls)
    assert [int(x) for x in assert_checkpoint_roundtrip(ds)] == TF_EXAMPLE


@pytest.mark.parametrize("num_parallel_calls", [None, 2])
def test_shuffled_children_over_streaming_parent_checkpoint_roundtrip(num_parallel_calls: int | None) -> None:
    ds = _CountingStream(5).interleave(lambda x: Dataset.range(int(x) * 10, int(x) * 10 + 4).shuffle(4),
                                       cycle_length=3, block_length=2, num_parallel_calls=num_parallel_calls)
    values = [int(x) for x in assert_checkpoint_roundtrip(ds)]
    assert sorted(values) == sorted(x * 10 + i for x in range(5) for i in range(4))


def test_restore_repulls_only_open_slots_not_whole_input() -> None:
    parent = _CountingStream(1000)
    ds = parent.interleave(lambda x: Dataset.range(3), cycle_length=4)
    iterator = ds.iterator(seed=0)
    for _ in range(2000):
        next(iterator)
    state = iterator.get_state()
    parent.pulls = 0
    restored = ds.iterator(seed=1)
    restored.set_state(state)
    assert parent.pulls == 4  # one re-pull per open slot
    assert [int(next(restored)) for _ in range(8)] == [int(next(iterator)) for _ in range(8)]


# ---- threads ------------------------------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize("deterministic", [True, False])
def test_error_in_child_raises_original_type_and_stops_threads(deterministic: bool) -> None:
    baseline = threading.active_count()
    ds = Dataset.range(4).interleave(lambda x: Dataset.range(int(x) * 5, int(x) * 5 + 5).map(_fail_on_seven),
                                     cycle_length=4, num_parallel_calls=4, deterministic=deterministic)
    iterator = iter(ds)
    with pytest.raises(_ChildFailure, match="element 7 is bad") as info:
        for _ in iterator:
            pass
    assert any(entry.name == "_fail_on_seven" for entry in info.traceback)  # the child's own frames
    assert threading.active_count() == baseline
    with pytest.raises(StopIteration):  # a failed iterator is finished, as a failed generator is
        next(iterator)


@pytest.mark.timeout(30)
def test_close_stops_producer_threads_of_endless_children() -> None:
    baseline = threading.active_count()
    ds = Dataset.range(3).interleave(lambda x: Dataset.from_tensors(x).repeat(), cycle_length=3,
                                     num_parallel_calls=3)
    iterator = iter(ds)
    assert [int(next(iterator)) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    assert threading.active_count() == baseline + 3
    iterator.close()
    assert threading.active_count() == baseline
    iterator.close()  # idempotent


@pytest.mark.timeout(30)
def test_exhausted_iterator_leaves_no_threads() -> None:
    baseline = threading.active_count()
    ds = Dataset.range(1, 6).interleave(_repeat_self, cycle_length=2, num_parallel_calls=2)
    assert len(_ints(ds)) == 15
    assert threading.active_count() == baseline


@pytest.mark.timeout(30)
def test_parallel_calls_read_all_children_at_once() -> None:
    # Each child's first read waits until all four children are reading: it
    # passes only if the reads run at the same time (sequential reads would
    # break the barrier after its timeout). No wall-clock threshold.
    barrier = threading.Barrier(4, timeout=10)
    first_reads: set[int] = set()
    lock = threading.Lock()

    def read(value: Any) -> Any:
        with lock:
            first = int(value) not in first_reads
            first_reads.add(int(value))
        if first:
            barrier.wait()
        return value

    def child(x: Any) -> Dataset:
        return Dataset.from_tensors(x).repeat(3).map(read)

    ds = Dataset.range(4).interleave(child, cycle_length=4, num_parallel_calls=4)
    assert _ints(ds) == [0, 1, 2, 3] * 3
    assert not barrier.broken


@pytest.mark.timeout(30)
def test_dropped_iterator_stops_its_threads() -> None:
    baseline = threading.active_count()
    iterator = iter(Dataset.range(2).interleave(lambda x: Dataset.from_tensors(x).repeat(), cycle_length=2,
                                                num_parallel_calls=2))
    next(iterator)
    del iterator  # no reference cycle through the threads, so this closes it at once
    assert threading.active_count() == baseline
