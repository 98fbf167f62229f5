"""`stratagem run --nnodes 2:3`: a host dies mid-epoch, the job goes on with 2, and a new host joins.

Each "host" is one `stratagem run` (its supervisor plus one worker) on
127.0.0.1, in its own process group so it can be killed whole. The workers
fit with BackupAndRestore(save_freq=1) and log each completed step's example
ids; the steps that count are, for each (epoch, step), those of the latest
start that ran it, which is what the final weights come from.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from stratagem.launcher.ports import find_free_port
from stratagem.testing.warm_processes import ScriptProcess

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "scripts" / "elastic_fit.py"
EPOCHS, NUM_EXAMPLES, STEPS_PER_EPOCH = 3, 360, 30


def _records(out: Path) -> list[dict]:
    records = []
    for path in out.glob("steps-*.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return records


def _wait(what: str, condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s waiting for {what}"
        time.sleep(0.2)


def _kill_host(agent: subprocess.Popen) -> None:
    """SIGKILL a supervisor and its workers at once, as when their host dies."""
    children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(int(p.name)) == agent.pid]
    for pid in [agent.pid, *children]:
        os.kill(pid, signal.SIGKILL)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(400)
def test_host_lost_mid_epoch_then_one_added_every_example_once(tmp_path: Path) -> None:
    port = find_free_port()
    env = dict(os.environ) | {"STRATAGEM_RUN_ID": f"elastic-test-{port}"}
    agent = [sys.executable, "-m", "stratagem.launcher.cli", "run", "--nnodes", "2:3", "--master-port", str(port),
             "--max-restarts", "3", "--timeout", "60", str(SCRIPT), str(tmp_path), str(EPOCHS), "0.1"]
    (tmp_path / "reference").mkdir()
    # The reference is one plain process (no launcher, nothing elastic about it): a warm one, as in tests/dist.
    reference = ScriptProcess([str(SCRIPT), str(tmp_path / "reference"), str(EPOCHS), "0"], env=env, cwd=os.getcwd(),
                              log_path=tmp_path / "reference.log")

    def start(index: int) -> subprocess.Popen:
        log = open(tmp_path / f"agent{index}.log", "w")  # noqa: SIM115 -- closed with the process
        return subprocess.Popen(agent, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    agents = [start(0)]
    try:
        # The first agent serves the rendezvous: the one host this test must not kill.
        _wait("the rendezvous endpoint", lambda: _listening(port), 60)
        agents += [start(1), start(2)]
        _wait("step 8 on 3 workers", lambda: any(r["batch"] >= 8 and r["world_size"] == 3
                                                 for r in _records(tmp_path)), 150)
        _kill_host(agents[2])
        _wait("steps on the 2 left", lambda: any(r["world_size"] == 2 for r in _records(tmp_path)), 120)
        agents.append(start(3))
        _wait("steps on 3 workers again", lambda: len({r["attempt"] for r in _records(tmp_path)
                                                        if r["world_size"] == 3}) >= 2, 120)
        (tmp_path / "fast").touch()  # nothing left to do mid-epoch: the steps need not be slow any more
        for index in (0, 1, 3):
            assert agents[index].wait(timeout=240) == 0, (tmp_path / f"agent{index}.log").read_text()[-3000:]
    finally:
        for process in agents:
            if process.poll() is None:
                _kill_host(process)
    records = _records(tmp_path)
    latest: dict[tuple[int, int], float] = {}
    for r in records:
        key = (r["epoch"], r["batch"])
        latest[key] = max(latest.get(key, 0.0), r["attempt"])
    for epoch in range(EPOCHS):
        seen = Counter(i for r in records if r["epoch"] == epoch and r["attempt"] == latest[(epoch, r["batch"])]
                       for i in r["ids"])
        assert sorted(seen) == list(range(NUM_EXAMPLES)) and set(seen.values()) == {1}, f"epoch {epoch}: {seen}"
    # Each start resumes where the one before it stopped (its last step, or the one after), never from scratch.
    starts = sorted({r["attempt"] for r in records})
    spans = [(min(steps), max(steps), sizes.pop()) for a in starts
             if (steps := [(r["epoch"], r["batch"]) for r in records if r["attempt"] == a])
             and len(sizes := {r["world_size"] for r in records if r["attempt"] == a}) == 1]
    assert [size for _, _, size in spans] == [3, 2, 3], spans  # lost a host, then took the added one in
    for (_, last, _), (first, _, _) in zip(spans, spans[1:]):
        assert last <= first <= (last[0], last[1] + 1) or first == (last[0] + 1, 0), spans
    reference.wait(timeout=120)
    result = json.loads((tmp_path / "result.json").read_text())
    expected = json.loads((tmp_path / "reference" / "result.json").read_text())
    assert abs(result["accuracy"] - expected["accuracy"]) <= 0.01, (result, expected)
