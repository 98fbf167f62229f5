"""Batch-level callbacks under ParameterServerStrategy run on the chief, as each step completes.

A real chief, worker and server on loopback fit 2 epochs of 6 steps with a recording
callback, ModelCheckpoint(save_freq=3) and the progress bar: the chief's hooks see
every step in order with finite logs; the checkpoints hold the servers' values (not the
chief's stale copy); the worker's callbacks see no batch (it runs steps, the chief reports them).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from stratagem.checkpoint.io import load_state
from stratagem.testing.ps_cluster import LocalPSCluster
from tests.dist.ps_scripts import fit_callbacks

pytestmark = pytest.mark.dist
SCRIPTS = Path(__file__).parent / "ps_scripts"


@pytest.mark.timeout(120)
def test_batch_hooks_run_on_the_chief_per_step_and_checkpoints_hold_server_values(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with LocalPSCluster(SCRIPTS / "fit_callbacks.py", num_workers=1, num_ps=1, log_dir=tmp_path,
                        args=(str(out),)) as cluster:
        assert cluster.wait("chief", 0, 100) == 0, cluster.logs()
        assert cluster.wait("worker", 0, 30) == 0, cluster.logs()
    chief = json.loads((out / "chief0.json").read_text())
    steps, epochs = fit_callbacks.STEPS, fit_callbacks.EPOCHS
    assert chief["begins"] == list(range(steps)) * epochs
    # Each end: the step, a finite loss in the logs, and the fit's position just past that step.
    assert chief["ends"] == [[step, True, step + 1] for step in range(steps)] * epochs
    worker = json.loads((out / "worker0.json").read_text())
    assert worker["begins"] == [] and worker["ends"] == []
    saved = sorted(p.name for p in out.glob("ckpt-*.weights.pt"))
    assert saved == ["ckpt-1-3.weights.pt", "ckpt-1-6.weights.pt", "ckpt-2-3.weights.pt", "ckpt-2-6.weights.pt"]
    initial = [np.asarray(w, dtype=np.float32) for w in chief["initial"]]
    first = list(load_state(str(out / "ckpt-1-3.weights.pt")).values())
    last = list(load_state(str(out / "ckpt-2-6.weights.pt")).values())
    # The chief never trains: without pulling the servers' values its checkpoints would hold the initial weights.
    assert max(float((t - torch.as_tensor(w)).abs().max()) for t, w in zip(first, initial)) > 1e-4
    assert max(float((a - b).abs().max()) for a, b in zip(first, last)) > 1e-4
    chief_log = (tmp_path / "chief0.log").read_text()
    assert f"{steps}/{steps}" in chief_log, chief_log[-2000:]  # the progress bar counted the steps
