"""bench_fit's raw DDP baseline destroys its gloo group only after the DDP module is gone.

Destroyed the other way round (the group first, the DDP module when its frame
ends), the reducer drops the group's last reference with the GIL held and the
group's destructor waits on a gloo thread that needs the GIL to free a finished
all-reduce's tensor: a deadlock that hung ``make bench`` (see
``run_in_gloo_group``). Here rank 1 joins rank 0's all-reduce a second late, so
the all-reduce is still in flight when rank 0's group goes: in that old order
both ranks hung every time (2 of 2 runs); in this one they finish.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from bench import _fit_workloads
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist


def _ddp_leaving_an_all_reduce_in_flight(rank: int, world_size: int) -> int:
    net = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    if rank == 1:
        time.sleep(1.0)
    loss = torch.ones(())
    dist.all_reduce(loss, async_op=True)  # not waited for: gloo's thread frees the work, and with it the tensor
    return rank


def _worker(rank: int, world_size: int) -> int:
    return _fit_workloads.run_in_gloo_group(_ddp_leaving_an_all_reduce_in_flight, rank, world_size, timeout_s=20)


@pytest.mark.timeout(60)
def test_the_group_is_destroyed_after_the_ddp_module_even_with_an_all_reduce_in_flight() -> None:
    started = time.monotonic()
    assert run_workers(_worker, world_size=2, timeout_s=30) == [0, 1]
    assert time.monotonic() - started < 20  # it waited for the late rank, not for a timeout
