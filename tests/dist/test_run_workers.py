"""The test harness itself: run_workers returns what each rank's function returned, tensors included."""

from __future__ import annotations

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
