"""Seed-shaped programs that trained wrong or died at exit (issue 21 item 6), each run as its users run it.

- A Keras 3 model under ``ShardedDataParallelStrategy`` on 2 replicas trains as one
  replica on the global batch (it did not train at all: Keras read its own
  variables, never FSDP's gathered parameters) and both processes exit 0.
- Seed 000's Mirrored snippet (parallel map + prefetch, the input runs out in the
  middle of training) trains and both processes exit 0 (they aborted at exit).
- ``ParameterServerStrategy`` fit on a ``stratagem.data`` Dataset with "accuracy"
  trains (it failed in the metric).

The first two start each rank as its own interpreter (``stratagem run``): an abort
at interpreter exit is only seen there, not in run_workers' forked workers, which
leave through ``os._exit``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from stratagem.testing.ps_cluster import LocalPSCluster
from tests.dist._keras_models import train_seed_cnn  # imports Keras here, before a test watches os.environ

pytestmark = pytest.mark.dist
SCRIPTS = Path(__file__).parent / "seed_scripts"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_parameter_server_fit_on_a_dataset_with_accuracy_trains(tmp_path: Path) -> None:
    out = tmp_path / "history.json"
    with LocalPSCluster(SCRIPTS / "ps_dataset_fit.py", num_workers=2, num_ps=1, log_dir=tmp_path,
                        args=(str(out),)) as cluster:
        assert cluster.wait("chief", 0, 100) == 0, cluster.logs()
    history = json.loads(out.read_text())
    assert len(history["loss"]) == 3
    assert history["loss"][-1] < 0.7 * history["loss"][0], history  # it learns: the loss falls
    assert history["accuracy"][-1] > 0.7, history  # four classes: chance is 0.25


def _launch_two(script: str, out: Path) -> str:
    """``stratagem run -n 2 script out``; asserts it and both ranks exit 0 and nothing aborted; returns the output."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               STRATAGEM_TIMEOUT_S="60")
    proc = subprocess.run([sys.executable, "-m", "stratagem.launcher.cli", "run", "-n", "2", str(SCRIPTS / script),
                           str(out)], cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=100)
    assert proc.returncode == 0, proc.stdout[-4000:]
    for abort in ("terminate called", "Aborted", "core dumped", "exited with"):
        assert abort not in proc.stdout, proc.stdout[-4000:]
    return proc.stdout


@pytest.mark.timeout(150)
def test_keras_model_under_sharded_strategy_matches_one_replica_and_exits_0(tmp_path: Path) -> None:
    _launch_two("sharded_keras.py", tmp_path)
    sharded = np.load(tmp_path / "weights.npz")
    history = json.loads((tmp_path / "history.json").read_text())
    reference = train_seed_cnn("adam")  # one replica, the global batch
    assert sorted(sharded.files) == sorted(reference)
    for name, expected in reference.items():
        torch.testing.assert_close(sharded[name], expected, rtol=1e-5, atol=1e-5, msg=name)
    assert history["accuracy"][-1] > 0.2  # it trained (it stayed at chance, loss 2.30, before)
    assert history["moving_mean_max"] > 0.0  # BatchNormalization's statistics moved under the sharded call
