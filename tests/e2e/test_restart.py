"""A worker SIGKILLed mid-epoch under `stratagem run --max-restarts 2` with BackupAndRestore:
the job finishes, with the weights of an uninterrupted run.

The uninterrupted run is the reference, not what is tested: it runs in warm processes with the environment
`stratagem run -n 2` gives its workers (``launched_processes``; the same script, seeds and thread count), which
saves two interpreters' start-up. The killed run goes through the launcher's real exec and restart path.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stratagem.checkpoint.io import load_state
from stratagem.testing.warm_processes import launched_processes

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "scripts" / "train_with_backup.py"
STEPS = 3 * 13  # 3 epochs of 200 examples in batches of 16


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "STRATAGEM_DISABLE_SCRIPT_LAUNCH"} | {"STRATAGEM_TIMEOUT_S": "60"}


def _run(tmp: Path, name: str, kill_step: int, kill_rank: int) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / f"{name}.safetensors"
    proc = subprocess.run(
        [sys.executable, "-m", "stratagem.launcher.cli", "run", "-n", "2", "--max-restarts", "2",
         str(SCRIPT), str(tmp / f"{name}-backup"), str(out), str(kill_step), str(kill_rank)],
        env=_env(), capture_output=True, text=True, timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, load_state(out)


def _run_uninterrupted(tmp: Path) -> dict:
    """The reference: the script on 2 replicas, never killed, in warm processes with the launcher's environment."""
    out, logs = tmp / "uninterrupted.safetensors", tmp / "uninterrupted-logs"
    logs.mkdir()
    workers = launched_processes([str(SCRIPT), str(tmp / "uninterrupted-backup"), str(out), "-1", "0"], 2,
                                 env=_env(), cwd=tmp, log_dir=logs)
    try:
        codes = [worker.wait(150) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()  # a no-op once it has ended
    assert codes == [0, 0], "\n".join((logs / f"rank{r}.log").read_text()[-3000:] for r in range(2))
    return load_state(out)


@pytest.mark.timeout(300)
def test_killed_worker_is_restarted_and_final_weights_match_uninterrupted(tmp_path: Path) -> None:
    expected = _run_uninterrupted(tmp_path)
    chooser = random.Random()
    kill_step, kill_rank = chooser.randrange(3, STEPS - 2), chooser.randrange(2)
    proc, restarted = _run(tmp_path, "killed", kill_step=kill_step, kill_rank=kill_rank)
    assert f"worker rank {kill_rank} failed" in proc.stderr and "restarting all workers" in proc.stderr
    for name, value in expected.items():
        torch.testing.assert_close(restarted[name], value, rtol=0, atol=1e-6,
                                   msg=lambda m: f"{name} after a kill at step {kill_step} on rank {kill_rank}: {m}")
