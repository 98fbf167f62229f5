"""An elastic job on loopback listens on loopback only: its rendezvous store, the workers' store and gloo.

torch's elastic agent served its rendezvous store on every interface
(``*:PORT``); ``stratagem run --nnodes MIN:MAX`` binds each listener to the
job's address. The test reads the listening TCP sockets of the supervisor and
its workers from /proc (Linux).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stratagem.launcher.ports import find_free_port

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

SCRIPT = Path(__file__).parent / "scripts" / "listening_worker.py"
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
        except OSError:
            pass
    return inodes


def _listening(inodes: set[str]) -> list[tuple[str, int]]:
    """(address, port) of each listening TCP socket among ``inodes``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _LISTEN and fields[9] in inodes:
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                # The kernel prints each 32-bit word in host (little-endian) order.
                ordered = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.append((str(ipaddress.ip_address(ordered)), int(port, 16)))
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


@pytest.mark.timeout(120)
def test_loopback_elastic_job_listens_on_loopback_only(tmp_path: Path) -> None:
    port = find_free_port()
    command = [sys.executable, "-m", "stratagem.launcher.cli", "run", "--nnodes", "1:2", "--master-port", str(port),
               "-n", "2", "--timeout", "60", str(SCRIPT), str(tmp_path)]
    env = dict(os.environ) | {"STRATAGEM_RUN_ID": f"listeners-{port}"}
    log = open(tmp_path / "job.log", "w")  # noqa: SIM115 -- closed below
    job = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not all((tmp_path / f"ready-{rank}").exists() for rank in (0, 1)):
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "job.log").read_text()[-3000:]
            time.sleep(0.2)
        listeners = _listening(_socket_inodes(_tree(job.pid)))
        (tmp_path / "go").touch()
        assert job.wait(timeout=60) == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        if job.poll() is None:
            job.kill()
        log.close()
    assert ("127.0.0.1", port) in listeners, listeners  # the rendezvous store, served by this supervisor
    assert len(listeners) >= 3, listeners  # and the workers' store and gloo's, found too
    assert all(_is_loopback(address) for address, _ in listeners), listeners
