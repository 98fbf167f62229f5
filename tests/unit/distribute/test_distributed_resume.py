"""Distributed input positions: resume mid-epoch exactly, also onto a different number of workers.

Workers are simulated in one process with explicit InputContexts (no process
group is needed: seeds come from the saved state). The real 2-process path is
tests/dist/test_data_sharding.py.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from stratagem.data import AUTOTUNE, Dataset
from stratagem.distribute.input_lib import DistributedDataset
from stratagem.distribute.input_context import InputContext

NUM_ELEMENTS = 203  # not a multiple of the global batch: a short last batch too
GLOBAL_BATCH = 12


def add_noise_free(x: np.ndarray) -> np.ndarray:
    total = 0
    for i in range(300):  # a little Python work, so the parallel map really runs in workers
        total += i
    return x * 10 + (total - total)


def pipeline(parallel: bool) -> Dataset:
    ds = Dataset.from_tensor_slices(np.arange(NUM_ELEMENTS))
    ds = ds.map(add_noise_free, num_parallel_calls=2 if parallel else None)
    return ds.shuffle(64).batch(GLOBAL_BATCH).prefetch(AUTOTUNE)


def replicas(ds: Dataset, count: int) -> list[DistributedDataset]:
    # seed=5 stands in for the seed the strategy would agree on across workers.
    return [DistributedDataset(ds, input_context=InputContext(count, r, count), split_batches=True, seed=5)
            for r in range(count)]


def _elements(batch: object) -> list[int]:
    return [int(v) // 10 for v in np.asarray(batch).reshape(-1)]


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("restore_on", [2, 3, 1])
def test_resume_at_random_step_continues_with_exactly_the_rest(parallel: bool, restore_on: int) -> None:
    ds = pipeline(parallel)
    stop_after = random.Random(restore_on * 10 + parallel).randrange(1, NUM_ELEMENTS // GLOBAL_BATCH)
    iterators = [iter(r) for r in replicas(ds, 2)]
    seen: list[int] = []
    for _ in range(stop_after):
        for iterator in iterators:
            seen += _elements(next(iterator))
    state = json.loads(json.dumps(iterators[0].get_state()))
    assert state == iterators[1].get_state(), "every replica must hold the same position"

    rest: list[int] = []
    for iterator in (iter(r) for r in replicas(pipeline(parallel), restore_on)):
        iterator.set_state(state)
        for batch in iterator:
            rest += _elements(batch)
    assert len(seen) == stop_after * GLOBAL_BATCH
    assert sorted(seen + rest) == list(range(NUM_ELEMENTS)), "every element of the epoch exactly once"


def test_replicas_get_disjoint_rows_covering_every_global_batch() -> None:
    ds = Dataset.from_tensor_slices(np.arange(50)).shuffle(50, seed=3).batch(9)
    reference = [b.tolist() for b in ds.iterator(seed=0, epoch=0)]
    per_replica = [[b.tolist() for b in r] for r in replicas(ds, 3)]
    assert len({len(p) for p in per_replica}) == 1  # same number of steps on every replica
    for step, expected in enumerate(reference):
        got = sum((per_replica[r][step] for r in range(3)), [])
        assert sorted(got) == sorted(expected)
