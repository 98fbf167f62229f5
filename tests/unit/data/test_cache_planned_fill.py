"""A cache's first pass filled along the order its reader announced (``ops/_cache_columns.py``): the same
batches, in the same order, as the fill in index order; never where that could change an element."""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import pytest
import torch

import stratagem.tf as tf
from stratagem.data import AUTOTUNE, Dataset, Options
from stratagem.data._structure import same_elements
from stratagem.data.ops.cache import CacheDataset


def _seed_preprocessing(img: Any, label: Any) -> tuple[Any, Any]:
    img = tf.cast(img, tf.float64) / 255.0
    return tf.expand_dims(img, axis=-1), tf.one_hot(label, 10, dtype=tf.int32)


def _images(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, size=(n, 6, 5), dtype=np.uint8), rng.integers(0, 10, size=n)


def _per_element(dataset: Dataset) -> Dataset:
    options = Options()
    options.experimental_optimization.map_vectorization = False
    return dataset.with_options(options)


def _cache_of(dataset: Dataset) -> CacheDataset:
    while not isinstance(dataset, CacheDataset):
        dataset = dataset._parents[0]
    return dataset


def _chain(x: np.ndarray, y: np.ndarray, **shuffle: Any) -> Dataset:
    mapped = Dataset.from_tensor_slices((x, y)).map(_seed_preprocessing, num_parallel_calls=AUTOTUNE)
    return mapped.cache().shuffle(1000, seed=4, **shuffle).batch(64).prefetch(AUTOTUNE)


def _assert_same(got: list[Any], expected: list[Any]) -> None:
    assert len(got) == len(expected)
    for index, (batch, reference) in enumerate(zip(got, expected)):
        assert same_elements(batch, reference), f"batch {index} differs"


def test_seed_chain_fills_along_the_shuffle_with_the_index_order_fills_batches() -> None:
    x, y = _images(2600)  # three chunks of the fill, the last one short, and a short last batch
    chain = _chain(x, y)
    epoch1, epoch2 = list(chain.iterator(seed=0)), list(chain.iterator(seed=0, epoch=1))
    store = _cache_of(chain).store()
    assert store._slots is not None  # the planned fill ran (rows in the announced order) ...
    reference = _per_element(_chain(x, y))  # ... and the fill in index order, per element, gives the same batches
    assert _cache_of(reference).store()._slots is None
    _assert_same(epoch1, list(reference.iterator(seed=0)))
    _assert_same(epoch2, list(reference.iterator(seed=0, epoch=1)))
    assert epoch1[0][0].dtype == torch.float64 and epoch1[0][1].dtype == torch.int32


def test_a_served_batch_changed_in_place_leaves_the_cache_as_it_was() -> None:
    x, y = _images(2100)
    chain = _chain(x, y, reshuffle_each_iteration=False)
    first = []
    for images, labels in chain.iterator(seed=0):
        first.append((images.clone(), labels.clone()))
        images.fill_(-1.0)  # a reader normalising in place: its batch is its own, the cache keeps the element
        labels.zero_()
    _assert_same(list(chain.iterator(seed=0, epoch=1)), first)


def _python_random(img: Any, label: Any) -> tuple[Any, Any]:
    """Draws from Python's generator per element: vmap cannot run it (the draw would be one per batch)."""
    return tf.cast(img, tf.float64) * random.random(), label


def test_a_map_drawing_random_numbers_is_filled_in_index_order() -> None:
    # Computed along the shuffle's order, element i would get another draw; in index order it gets the i-th.
    x, y = _images(1500)
    random.seed(7)
    shuffled = Dataset.from_tensor_slices((x, y)).map(_python_random).cache().shuffle(1000, seed=4).batch(50)
    batches = list(shuffled.iterator(seed=0))
    assert _cache_of(shuffled).store()._slots is None
    random.seed(7)
    in_order = list(Dataset.from_tensor_slices((x, y)).map(_python_random).iterator(seed=0))
    order = shuffled._parents[0]._permutation(shuffled._parents[0]._context(seed=0, epoch=0))
    expected = [tuple(np.stack([np.asarray(in_order[i][k]) for i in order[start:start + 50]]) for k in range(2))
                for start in range(0, 1500, 50)]
    assert len(batches) == len(expected)
    for got, want in zip(batches, expected):
        assert np.array_equal(np.asarray(got[0]), want[0]) and np.array_equal(np.asarray(got[1]), want[1])


def test_a_second_reader_off_the_announced_order_reads_the_finished_fill() -> None:
    x, y = _images(2300)
    chain = _chain(x, y)
    reference = _per_element(_chain(x, y))
    one, two = chain.iterator(seed=0, epoch=0), chain.iterator(seed=0, epoch=1)  # two permutations at once
    got_one, got_two = [next(one) for _ in range(3)], [next(two) for _ in range(2)]
    got_one += list(one)
    got_two += list(two)
    assert _cache_of(chain).store()._slots is not None
    _assert_same(got_one, list(reference.iterator(seed=0, epoch=0)))
    _assert_same(got_two, list(reference.iterator(seed=0, epoch=1)))


def test_a_restored_position_gives_the_rest_of_the_pass() -> None:
    x, y = _images(2200)
    chain = _chain(x, y)
    iterator = chain.iterator(seed=0)
    head = [next(iterator) for _ in range(5)]
    state = iterator.get_state()
    fresh = _chain(x, y)  # a new process: its cache is empty, and the restored reader announces the rest
    restored = fresh.iterator(seed=0)
    restored.set_state(state)
    _assert_same(head + list(restored), list(_per_element(_chain(x, y)).iterator(seed=0)))


def _slow(value: Any) -> Any:
    time.sleep(0.002)
    return value


def test_autotune_prefetch_stays_inline_when_the_consumer_pauses_once() -> None:
    import threading

    def threads() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "stratagem-prefetch" and t.is_alive())

    before, started = threads(), False
    for index, _ in enumerate(Dataset.range(40).map(_slow).prefetch(AUTOTUNE)):
        if index == 3:
            time.sleep(0.02)  # a garbage collection, once: no work a thread could overlap
        started = started or threads() > before
    assert not started


class _Calls:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, img: Any, label: Any) -> tuple[Any, Any]:
        self.calls += 1
        return _seed_preprocessing(img, label)


def test_the_planned_fill_calls_the_map_once_per_growing_chunk() -> None:
    # 20,000 elements: the first chunk in index order (where vmap decides), row 0 alone once, then chunks along
    # the order of 1,024, 1,024, 2,048, 4,096, 8,192 and 3,616 rows: 8 calls (a chunk of 1,024 each: 22).
    x, y = _images(20_000)
    counted = _Calls()
    chain = _counted_chain(x, y, counted)
    batches = list(chain.iterator(seed=0))
    assert counted.calls == 8 and _cache_of(chain).store()._slots is not None
    _assert_same(batches, list(_per_element(_counted_chain(x, y, _Calls())).iterator(seed=0)))


def _counted_chain(x: np.ndarray, y: np.ndarray, fn: _Calls) -> Dataset:
    return Dataset.from_tensor_slices((x, y)).map(fn, num_parallel_calls=AUTOTUNE).cache().shuffle(1000, seed=4).batch(64)


def test_column_pages_are_populated_before_the_writes_after_a_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import threading

    from stratagem.data import _column_memory

    if _column_memory._LIBC is None:
        return  # no madvise here: nothing is populated either way
    calls: list[threading.Thread] = []
    monkeypatch.setattr(_column_memory, "_populate", lambda owner, start, stop: calls.append(threading.current_thread()))
    touched = np.ones(8 << 20, dtype=np.uint8)  # resident: no populating unless a fork came between
    _column_memory._FORKED.clear()
    _column_memory._populate_in_background(touched, touched.ctypes.data, touched.nbytes)
    assert calls == []
    pid = os.fork()
    if pid == 0:  # the child leaves at once: only the parent's pages matter here
        os._exit(0)
    os.waitpid(pid, 0)
    _column_memory._populate_in_background(touched, touched.ctypes.data, touched.nbytes)
    assert calls == [threading.current_thread()]  # in the writing thread, before it writes
    _column_memory._populate_in_background(touched, touched.ctypes.data, touched.nbytes)
    assert len(calls) == 1  # once per fork


def test_column_pages_are_populated_only_where_they_are_not_resident() -> None:
    import threading

    from stratagem.data import _column_memory

    def populating() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "stratagem-cache-pages")

    if _column_memory._LIBC is None:
        return  # no madvise here: nothing is populated either way
    touched = np.ones(8 << 20, dtype=np.uint8)  # every page written: resident
    before = populating()
    _column_memory._populate_in_background(touched, touched.ctypes.data, touched.nbytes)
    assert populating() == before
    column = _column_memory.empty_rows(torch.empty(0, 1024, dtype=torch.float64), 2048)  # 16 MB, never touched
    assert isinstance(column, torch.Tensor) and column.shape == (2048, 1024) and column.dtype == torch.float64
    column.fill_(2.0)
    assert float(column.sum()) == 2.0 * 2048 * 1024
    halves = _column_memory.empty_rows(torch.empty(0, 3, dtype=torch.bfloat16), 5)  # no numpy dtype: torch's own
    assert halves.dtype == torch.bfloat16 and halves.shape == (5, 3)
