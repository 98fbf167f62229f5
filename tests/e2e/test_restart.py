"""A worker SIGKILLed mid-epoch under `stratagem run --max-restarts 2` with BackupAndRestore:
the job finishes, with the weights of an uninterrupted run."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stratagem.checkpoint.io import load_state

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "scripts" / "train_with_backup.py"
STEPS = 3 * 13  # 3 epochs of 200 examples in batches of 16


def _run(tmp: Path, name: str, kill_step: int, kill_rank: int) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / f"{name}.safetensors"
    env = {k: v for k, v in os.environ.items() if k != "STRATAGEM_DISABLE_SCRIPT_LAUNCH"} | {"STRATAGEM_TIMEOUT_S": "60"}
    proc = subprocess.run(
        [sys.executable, "-m", "stratagem.launcher.cli", "run", "-n", "2", "--max-restarts", "2",
         str(SCRIPT), str(tmp / f"{name}-backup"), str(out), str(kill_step), str(kill_rank)],
        env=env, capture_output=True, text=True, timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, load_state(out)


@pytest.mark.timeout(300)
def test_killed_worker_is_restarted_and_final_weights_match_uninterrupted(tmp_path: Path) -> None:
    _, expected = _run(tmp_path, "uninterrupted", kill_step=-1, kill_rank=0)
    chooser = random.Random()
    kill_step, kill_rank = chooser.randrange(3, STEPS - 2), chooser.randrange(2)
    proc, restarted = _run(tmp_path, "killed", kill_step=kill_step, kill_rank=kill_rank)
    assert f"worker rank {kill_rank} failed" in proc.stderr and "restarting all workers" in proc.stderr
    for name, value in expected.items():
        torch.testing.assert_close(restarted[name], value, rtol=0, atol=1e-6,
                                   msg=lambda m: f"{name} after a kill at step {kill_step} on rank {kill_rank}: {m}")
