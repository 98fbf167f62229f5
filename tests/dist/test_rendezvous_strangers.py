"""A stranger writing the rendezvous' join keys neither joins a job with a secret nor holds it up.

Rank 1 first acts as a stranger: its own ``TCPStore`` client, without the
secret, writes every key a joining rank writes (``stratagem/joined/N``, its gloo
address in our check and in gloo's own key), under the names stratagem uses with and without the no-secret
prefix; then it waits and joins for real. Rank 0 must not start before that
real join, nor much after it, and the job must compute correctly.
"""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist

import stratagem
from stratagem.distribute import job_secret
from stratagem.distribute.options import CommunicationOptions
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist

STRANGER_HEAD_START_S = 1.5
# Join keys, our check of gloo's address, and gloo's own key for rank 1's address (seen with list_keys).
FORGED_KEYS = ("stratagem/joined/0", "stratagem/joined/1", "stratagem/gloo_address/1", "stratagem/pg/0//cpu//0/1")


def _worker_with_a_stranger(rank: int, world_size: int) -> dict[str, float | list[str]]:
    forged: list[str] = []
    if rank == 1:
        stranger = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                 timeout=datetime.timedelta(seconds=30))  # waits for rank 0's store
        for prefix in ("", "stratagem-job/"):  # the names in our code, and a no-secret job's prefix
            for key in FORGED_KEYS:
                stranger.set(prefix + key, "192.0.2.1" if "address" in key else "1")
                forged.append(prefix + key)
        time.sleep(STRANGER_HEAD_START_S)  # rank 0 would start now if it believed the forged keys
    joined_at = time.time()
    strategy = stratagem.distribute.MirroredStrategy(
        num_replicas=world_size, communication_options=CommunicationOptions(timeout_seconds=30))
    ready_at = time.time()
    total = strategy.reduce("sum", torch.ones(()) * (rank + 1))
    return {"joined_at": joined_at, "ready_at": ready_at, "total": float(total), "forged": forged}


@pytest.mark.timeout(120)
def test_stranger_writing_join_keys_neither_joins_nor_delays_the_job() -> None:
    chief, worker = run_workers(_worker_with_a_stranger, world_size=2, timeout_s=90,
                                env={job_secret.SECRET_ENV: job_secret.generate()})
    assert len(worker["forged"]) == 2 * len(FORGED_KEYS)
    # Rank 0 waited for rank 1's real join, not the stranger's keys ...
    assert chief["ready_at"] >= worker["joined_at"], (chief, worker)
    # ... and started right after it (a forged gloo address would have held it up until its timeout).
    assert chief["ready_at"] - worker["joined_at"] < 10.0, (chief, worker)
    assert chief["total"] == worker["total"] == 3.0
