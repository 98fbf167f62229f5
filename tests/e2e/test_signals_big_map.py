"""Signals to the launcher of a job whose parallel map returns 128 KiB elements: nothing outlives the job."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stratagem.launcher.ports import find_free_ports
from tests.e2e._processes import alive

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "scripts" / "big_map.py"
SIGNALS = (signal.SIGKILL, signal.SIGINT, signal.SIGTERM)


def _job_pids(pid_dir: Path, timeout_s: float = 60) -> list[int]:
    """The replicas' and their map workers' pids, once both replicas iterate their map."""
    deadline = time.monotonic() + timeout_s
    while len(list(pid_dir.glob("*.pid"))) < 2:
        assert time.monotonic() < deadline, f"the job did not start: {list(pid_dir.iterdir())}"
        time.sleep(0.1)
    return [int(pid) for f in pid_dir.glob("*.pid") for pid in f.read_text().split()]


def _can_listen(port: int) -> bool:
    # As the rendezvous binds (SO_REUSEADDR): only a socket still listening blocks it.
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


def test_signal_to_launcher_leaves_no_process_and_frees_the_master_port(tmp_path: Path) -> None:
    # The three jobs run at once: each start costs seconds of torch imports.
    ports = find_free_ports(len(SIGNALS), "127.0.0.1")
    env = dict(os.environ, STRATAGEM_TIMEOUT_S="60")
    jobs = []
    for sig, port in zip(SIGNALS, ports):
        pid_dir = tmp_path / sig.name
        pid_dir.mkdir()
        launcher = subprocess.Popen(
            [sys.executable, "-m", "stratagem.launcher.cli", "run", "-n", "2", "--master-port", str(port),
             str(SCRIPT), str(pid_dir)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        jobs.append((sig, port, launcher, pid_dir))
    try:
        started = [(sig, port, launcher, _job_pids(pid_dir)) for sig, port, launcher, pid_dir in jobs]
        time.sleep(1.5)  # the workers' result pipes fill up while the replicas sleep
        for sig, port, launcher, pids in started:  # one job at a time, so each gets the host to itself
            assert len(pids) == 6, f"2 replicas with 2 map workers each expected, got {pids}"
            launcher.send_signal(sig)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(alive(p) for p in [launcher.pid, *pids]):
                time.sleep(0.05)
            left = [p for p in [launcher.pid, *pids] if alive(p)]
            assert not left, f"{sig.name}: processes of the job left after 5 s: {left}"
            assert _can_listen(port), f"{sig.name}: --master-port {port} still held after the job ended"
    finally:
        for _, _, launcher, pid_dir in jobs:
            for f in pid_dir.glob("*.pid"):
                for pid in map(int, f.read_text().split()):
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)
            if launcher.poll() is None:
                launcher.kill()
            launcher.wait(timeout=10)
