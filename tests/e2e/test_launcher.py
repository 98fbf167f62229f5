"""`stratagem run` and script self-launch as real subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e._processes import assert_all_gone

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).parent / "scripts"
LAUNCH = [sys.executable, "-m", "stratagem.launcher.cli", "run"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("STRATAGEM_DISABLE_SCRIPT_LAUNCH", None)  # allow the script to launch itself
    env["STRATAGEM_TIMEOUT_S"] = "60"
    return env


def _pids(pid_dir: Path, count: int, timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        files = sorted(pid_dir.glob("*.pid"))
        if len(files) == count and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.1)
    raise AssertionError(f"workers did not start: {list(pid_dir.iterdir())}")


def test_failing_rank_stops_job_with_its_traceback_and_nonzero_exit(tmp_path: Path) -> None:
    # The workers need no torch: what is tested is the launcher's handling of rank 1's error and of rank 0 left
    # waiting for it (saves two torch imports and a process group, ~4 s of CPU).
    start = time.monotonic()
    proc = subprocess.run([*LAUNCH, "-n", "2", str(SCRIPTS / "fails_on_rank_1.py"), str(tmp_path)],
                          env=_env(), capture_output=True, text=True, timeout=90)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1
    assert "Worker rank 1 (of 2) raised ValueError: boom on rank 1" in proc.stderr
    assert "ValueError: boom on rank 1" in proc.stderr
    assert "[rank 1] Traceback" in proc.stderr
    assert elapsed < 45, "rank 0 should be stopped at once, not left to time out"
    assert_all_gone(_pids(tmp_path, 2))


def test_plain_python_script_launches_its_replicas_with_rank_prefixes(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPTS / "replicas.py"), str(tmp_path)],
                          env=_env(), capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "[rank 0] replica 0 of 2: sum=3" in proc.stdout
    assert "[rank 1] replica 1 of 2: sum=3" in proc.stdout
    assert_all_gone(_pids(tmp_path, 2))


def test_local_replicas_get_a_tf_config_naming_their_job() -> None:
    proc = subprocess.run([*LAUNCH, "-n", "2", str(SCRIPTS / "reads_tf_config.py")],
                          env=_env(), capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    for rank in range(2):
        assert f"[rank {rank}] task {rank} of 2: RANK={rank} replica={rank} replicas=2 sum=2" in proc.stdout


def test_ctrl_c_stops_every_worker(tmp_path: Path) -> None:
    proc = subprocess.Popen([*LAUNCH, "-n", "2", "--grace-period", "2", str(SCRIPTS / "sleeper.py"), str(tmp_path)],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    pids = _pids(tmp_path, 2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) != 0
    assert_all_gone(pids)


def test_killed_supervisor_leaves_no_orphan(tmp_path: Path) -> None:
    proc = subprocess.Popen([*LAUNCH, "-n", "2", str(SCRIPTS / "sleeper.py"), str(tmp_path)],
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pids = _pids(tmp_path, 2)
    proc.kill()
    proc.wait(timeout=10)
    assert_all_gone(pids)
