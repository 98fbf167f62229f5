"""How a `stratagem run --ps P --workers W` job stops: a failing chief, workers out of restarts, a stopped launcher.

The tasks are plain Python scripts (no torch): what is checked is the launcher's handling of
their exits and of its own signals, with every task gone afterwards.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e._processes import assert_all_gone, children, ps_job_env

pytestmark = pytest.mark.e2e

LAUNCH = [sys.executable, "-m", "stratagem.launcher.cli", "run"]

# No torch. argv[1] "chief-fails": the chief exits 5 after 1 s; "workers-fail": workers exit 4
# and the chief 0 after 1.5 s (a worker without torch is gone in about 0.05 s); "sleep": everyone
# sleeps until stopped. Each writes its pid.
TASKS_SCRIPT = """
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
mode, pid_dir = sys.argv[1], sys.argv[2]
with open(os.path.join(pid_dir, f"{task['type']}{task['index']}.pid"), "w") as f:
    f.write(str(os.getpid()))
if task["type"] == "chief":
    time.sleep({"chief-fails": 1, "workers-fail": 1.5}.get(mode, 120))
    sys.exit(5 if mode == "chief-fails" else 0)
elif mode == "workers-fail":
    sys.exit(4)
else:
    time.sleep(120)
"""


@pytest.mark.timeout(120)
def test_failing_chief_stops_every_task_and_its_exit_status_is_the_jobs(tmp_path: Path) -> None:
    script = tmp_path / "tasks.py"
    script.write_text(TASKS_SCRIPT)
    proc = subprocess.run([*LAUNCH, "--ps", "1", "--workers", "2", "--grace-period", "2", str(script),
                           "chief-fails", str(tmp_path)], env=ps_job_env(), capture_output=True, text=True, timeout=100)
    assert proc.returncode == 5, proc.stderr[-3000:]
    assert "stratagem: The chief exited with code 5; the workers and parameter servers were stopped." in proc.stderr
    assert_all_gone([int(p.read_text()) for p in tmp_path.glob("*.pid")])


@pytest.mark.timeout(120)
def test_worker_without_restarts_left_stays_down_and_the_job_goes_on(tmp_path: Path) -> None:
    script = tmp_path / "tasks.py"
    script.write_text(TASKS_SCRIPT)
    proc = subprocess.run([*LAUNCH, "--ps", "1", "--workers", "2", str(script), "workers-fail", str(tmp_path)],
                          env=ps_job_env(), capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for index in (0, 1):
        assert (f"stratagem: worker {index} exited with code 4 and has no restarts left (--max-restarts 0); "
                "the job goes on without it") in proc.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "launcher-killed"])
def test_stopped_launcher_leaves_no_task_behind(tmp_path: Path, sig: signal.Signals) -> None:
    script = tmp_path / "tasks.py"
    script.write_text(TASKS_SCRIPT)
    proc = subprocess.Popen([*LAUNCH, "--ps", "1", "--workers", "2", "--grace-period", "2", str(script), "sleep",
                             str(tmp_path)], env=ps_job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pid"))) < 3 or len(tasks := children(proc.pid)) < 4:
            assert time.monotonic() < deadline, "the chief, 2 workers and the server did not all start"
            time.sleep(0.1)
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == (130 if sig == signal.SIGINT else -signal.SIGKILL)
    assert_all_gone(list(tasks))
