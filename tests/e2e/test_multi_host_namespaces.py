"""Two "hosts" as Linux network namespaces whose hostnames resolve to 127.0.0.1.

Each namespace has its own address on a veth pair and an /etc/hosts (``ip
netns exec`` mounts /etc/netns/NAME/hosts) mapping the hostname to loopback,
as Debian/Ubuntu and many container images do. gloo left alone would
advertise 127.0.0.1 to the other host; stratagem picks the interface that
reaches the chief. Needs root and ``ip netns``; skipped otherwise.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).parents[2]
SCRIPT = Path(__file__).parent / "scripts" / "host_replica.py"
LAUNCH = [sys.executable, "-m", "stratagem.launcher.cli", "run"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[tuple[str, str]]]:
    """[(namespace, address)] of two hosts joined by a veth pair; removed afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and the `ip` tool to make network namespaces")
    tag = f"{os.getpid() % 10000}"
    subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
    names = [f"stg{tag}a", f"stg{tag}b"]
    made: list[str] = []
    try:
        for name in names:
            _ip("netns", "add", name)
            made.append(name)
            hosts_dir = Path("/etc/netns") / name
            hosts_dir.mkdir(parents=True, exist_ok=True)
            (hosts_dir / "hosts").write_text(f"127.0.0.1 localhost\n127.0.0.1 {socket.gethostname()}\n")
        _ip("link", "add", f"{names[0]}v", "type", "veth", "peer", "name", f"{names[1]}v")
        result = []
        for index, name in enumerate(names):
            address = f"{subnet}.{index + 1}"
            _ip("link", "set", f"{name}v", "netns", name)
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", f"{name}v")
            _ip("-n", name, "link", "set", f"{name}v", "up")
            _ip("-n", name, "link", "set", "lo", "up")
            result.append((name, address))
    except (subprocess.CalledProcessError, OSError) as err:
        _remove(made)
        detail = err.stderr.strip() if isinstance(err, subprocess.CalledProcessError) else str(err)
        pytest.skip(f"cannot make network namespaces here: {detail}")
    try:
        yield result
    finally:
        _remove(made)


def _remove(names: list[str]) -> None:
    for name in names:  # deleting a namespace deletes its end of the veth pair, and so the pair
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10)
        shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


def _run_on_hosts(hosts: list[tuple[str, str]], argvs: list[list[str]], envs: list[dict[str, str]]
                  ) -> list[subprocess.CompletedProcess[str]]:
    procs = [
        subprocess.Popen(["ip", "netns", "exec", name, "env", *[f"{k}={v}" for k, v in env.items()], *LAUNCH, *argv],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for (name, _), argv, env in zip(hosts, argvs, envs)
    ]
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def test_nnodes_job_across_hosts_named_loopback_trains(hosts: list[tuple[str, str]]) -> None:
    chief = hosts[0][1]
    argvs = [["--nnodes", "2", "--node-rank", str(i), "--master-addr", chief, "--master-port", "29431",
              "--timeout", "30", str(SCRIPT)] for i in range(2)]
    results = _run_on_hosts(hosts, argvs, [{}, {}])
    for rank, result in enumerate(results):
        assert result.returncode == 0, result.stderr[-3000:]
        assert "resolves to 127.0.0.1" in result.stdout  # the case this test is about
        assert f"[rank {rank}] replica {rank} of 2: sum=3" in result.stdout
