"""The test harness itself: run_workers returns what each rank's function returned, tensors included, and names
where a rank that missed the deadline was stuck."""

from __future__ import annotations

import time

import pytest
import torch

from stratagem.testing import run_workers

pytestmark = pytest.mark.dist


def _tensor_of_rank(rank: int, world_size: int) -> dict:
    return {"rank": rank, "value": torch.full((3,), float(rank + world_size))}


@pytest.mark.timeout(60)
def test_results_come_back_by_value_even_tensors_after_the_worker_exited() -> None:
    results = run_workers(_tensor_of_rank, world_size=2, timeout_s=50)
    assert [r["rank"] for r in results] == [0, 1]
    torch.testing.assert_close(results[1]["value"], torch.full((3,), 3.0))


def _rank_1_stuck(rank: int, world_size: int) -> int:
    if rank == 1:
        _wait_forever()
    return rank


def _wait_forever() -> None:
    while True:
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_a_rank_past_the_deadline_is_reported_with_its_stack() -> None:
    with pytest.raises(TimeoutError) as raised:
        run_workers(_rank_1_stuck, world_size=2, timeout_s=3)
    message = str(raised.value)
    assert "rank(s) [1] did not finish within 3s. Finished: rank 0: ok" in message
    stacks = message.split("--- rank 1: its threads' Python stacks at the deadline ---", 1)[1]
    assert "in _wait_forever" in stacks and "in _rank_1_stuck" in stacks
