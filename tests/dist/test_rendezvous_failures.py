"""A peer that never starts fails the others within the timeout, naming it."""

from __future__ import annotations

import os
import time

import pytest

import stratagem
from stratagem.distribute.options import CommunicationOptions
from stratagem.errors import CollectiveTimeoutError
from stratagem.launcher.ports import find_free_port
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist

TIMEOUT_S = 3.0


def _try_join(rank: int) -> tuple[str, float]:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_PORT": str(find_free_port())})
    start = time.monotonic()
    try:
        stratagem.distribute.MirroredStrategy(
            num_replicas=2, communication_options=CommunicationOptions(timeout_seconds=TIMEOUT_S))
    except CollectiveTimeoutError as err:
        return f"{type(err).__name__}: {err}", time.monotonic() - start
    return "joined", time.monotonic() - start


def _worker_alone(rank: int, world_size: int) -> dict:
    # One process of a 2-process job: first as the chief whose peer never
    # comes, then as rank 1 whose chief never comes.
    return {"chief": _try_join(0), "worker": _try_join(1)}


@pytest.fixture(scope="module")
def result() -> dict:
    (outcome,) = run_workers(_worker_alone, world_size=1, timeout_s=60)
    return outcome


def test_missing_peer_fails_within_timeout_naming_rank(result: dict) -> None:
    message, elapsed = result["chief"]
    assert message.startswith("CollectiveTimeoutError")
    assert "Rank(s) [1] did not join" in message and "Received: missing_ranks=[1]" in message
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 5


def test_missing_chief_fails_within_timeout_naming_rank_0(result: dict) -> None:
    message, elapsed = result["worker"]
    assert message.startswith("CollectiveTimeoutError")
    assert "Could not reach the chief (rank 0)" in message
    assert elapsed < TIMEOUT_S + 10
