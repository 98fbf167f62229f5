"""A collective that fails names the rank to blame and its host (issue 21 item 5), within timeout + the probe.

Two spawns of 2 ranks, no launcher, timeout 3 s. Rank 1 hangs (it sleeps where
rank 0 all-reduces, as a SIGSTOPped peer does): rank 0's error names rank 1 and
the address it is at, and comes within the timeout plus the probe (README: at
most timeout + about 6 s). Rank 1 finishes its program instead (rank 0 alone calls
``predict``): rank 0's error says rank 1 finished and never made the call, not
"a peer closed its connection".
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.distribute import collectives
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist
TIMEOUT_S = 3


def _worker_hung_peer(rank: int, world_size: int) -> dict:
    strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
    strategy.reduce("sum", torch.ones(1))  # the group works
    if rank == 1:
        time.sleep(TIMEOUT_S + 8)  # hung past rank 0's timeout and probe, then gone
        return {}
    start = time.monotonic()
    try:
        strategy.reduce("sum", torch.ones(1))
    except Exception as err:  # noqa: BLE001 -- the error is what the test checks
        return {"type": type(err).__name__, "message": str(err), "seconds": time.monotonic() - start}
    return {"type": None}


def _worker_predict_on_one_rank(rank: int, world_size: int) -> dict:
    strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = stratagem.Model(nn.Linear(4, 2))
        model.compile(optimizer="sgd", loss="mse")
    if rank == 1:
        collectives.leave_process_group()  # the end of rank 1's program, as at its exit
        return {}
    try:
        model.predict(np.ones((8, 4), np.float32), batch_size=4, verbose=0)
    except Exception as err:  # noqa: BLE001
        return {"type": type(err).__name__, "message": str(err)}
    return {"type": None}


@pytest.mark.timeout(60)
def test_hung_peer_is_named_with_its_host_within_timeout_and_probe() -> None:
    result = run_workers(_worker_hung_peer, 2, timeout_s=40, env={"STRATAGEM_TIMEOUT_S": str(TIMEOUT_S)})[0]
    assert result["type"] == "CollectiveTimeoutError", result
    assert "[rank 0/2 at 127.0.0.1] all_reduce did not complete within 3s" in result["message"], result
    assert "rank 1 at 127.0.0.1 did not answer" in result["message"] and "unresponsive_ranks=[1]" in result["message"]
    assert result["seconds"] < TIMEOUT_S + 6 + 1, result  # the bound the README states, plus scheduling slack


@pytest.mark.timeout(60)
def test_predict_on_one_rank_names_the_rank_that_never_called() -> None:
    result = run_workers(_worker_predict_on_one_rank, 2, timeout_s=40, env={"STRATAGEM_TIMEOUT_S": str(TIMEOUT_S)})[0]
    assert result["type"] in ("CollectiveTimeoutError", "RuntimeError"), result
    assert "rank 1 at 127.0.0.1 had finished its program and was leaving the job, so it never made this call" \
        in result["message"], result
    assert "closed its connection; every" not in result["message"]
