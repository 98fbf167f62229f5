"""Rank 0 serves the rendezvous store: after an agreement (``collectives.any_rank``) it may end at once, as a fit that
raises on every replica right after agreeing does, without cutting off a rank still reading the agreed flags.

Seen once in a clean-clone run of tests/dist/test_rank_dependent_callbacks.py: rank 1 got "Connection reset by peer"
and a CollectiveTimeoutError naming rank 0 instead of the ConfigurationError every replica raises.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import stratagem
from stratagem.distribute import collectives
from stratagem.testing import run_workers

pytestmark = [pytest.mark.dist, pytest.mark.timeout(120)]


class _SlowReads:
    """Rank 1's store, whose reads of the agreed counts (``add(key, 0)``) start after rank 0 has read its own."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def add(self, key: str, amount: int) -> int:
        if amount == 0:
            time.sleep(1.0)
        return self._store.add(key, amount)


def _worker_agree_then_end(rank: int, world_size: int) -> list[bool]:
    stratagem.distribute.MultiWorkerMirroredStrategy()  # the group and its store
    if rank == 1:
        collectives._store = _SlowReads(collectives._store)
    # Rank 0 then returns at once, and run_workers' exit leaves the group without waiting (as after a crash).
    return collectives.any_rank([rank == 1, False], key="test/agree_then_end", timeout_s=20)


def test_store_host_ending_right_after_an_agreement_leaves_every_rank_its_answer() -> None:
    assert run_workers(_worker_agree_then_end, world_size=2, timeout_s=60) == [[True, False], [True, False]]
