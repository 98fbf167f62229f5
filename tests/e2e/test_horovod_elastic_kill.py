"""``hvd.elastic.run`` under `stratagem run --nnodes 2:3`: a host is SIGKILLed mid-epoch, the survivors go on.

Three "hosts" (each a `stratagem run` supervisor with one worker) on 127.0.0.1
train a Horovod elastic script. In epoch 0, step 2, the third host's worker
kills its supervisor and itself after its forward pass, before its backward pass
starts the gradients' all-reduce, so the other two are left inside that step. They must restart
from the last commit (step 2 not done), with every rank's state equal after
the sync and equal to what was committed, and, counting the committed steps
of each epoch, process every example exactly once.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from stratagem.launcher.ports import find_free_port

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "scripts" / "horovod_elastic_train.py"
EPOCHS, NUM_EXAMPLES = 2, 72


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob("log-*.jsonl")) for line in path.read_text().splitlines()]


def _wait_for_listener(port: int, agent: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert agent.poll() is None, f"host 0's agent exited with {agent.returncode} before serving the rendezvous"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"host 0's agent did not listen on port {port} within {timeout_s} s")


@pytest.mark.timeout(240)
def test_host_killed_mid_epoch_survivors_resume_from_the_commit_every_example_once(tmp_path: Path) -> None:
    port = find_free_port()
    env = dict(os.environ) | {"STRATAGEM_RUN_ID": f"hvd-elastic-{port}",
                              "STRATAGEM_ELASTIC_STATE": str(tmp_path / "state.pt")}
    command = [sys.executable, "-m", "stratagem.launcher.cli", "run", "--nnodes", "2:3", "--master-port", str(port),
               "--max-restarts", "2", "--timeout", "60", str(SCRIPT), str(tmp_path), str(EPOCHS)]
    agents = []
    for index in range(3):
        log = open(tmp_path / f"agent{index}.log", "w")  # noqa: SIM115 -- closed with the process
        # Host 2 is the one that dies; host 0 serves the rendezvous and must live.
        agents.append(subprocess.Popen(command, env=env | ({"DIE_AT": "0:2"} if index == 2 else {}), stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True))
        if index == 0:  # the first to bind the port serves the store: make sure it is host 0, not the victim
            _wait_for_listener(port, agents[0])
    try:
        for index in (0, 1):
            assert agents[index].wait(timeout=200) == 0, (tmp_path / f"agent{index}.log").read_text()[-3000:]
        assert agents[2].wait(timeout=10) == -9, "host 2's agent was killed by its worker"
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
    records = _records(tmp_path)
    attempts = sorted({r["attempt"] for r in records})
    synced = [[r for r in records if r["event"] == "synced" and r["attempt"] == a] for a in attempts]
    assert [sorted(r["rank"] for r in s) for s in synced] == [[0, 1, 2], [0, 1]], "3 workers, then the 2 left"
    for records_of_start in synced:  # every rank's whole state is the same after the sync
        assert len({json.dumps(r["checksum"]) for r in records_of_start}) == 1, records_of_start
    # The survivors resume where the last commit left off: 2 steps of epoch 0 done, the 3rd not.
    assert (synced[1][0]["epoch"], synced[1][0]["batch"]) == (0, 2)
    committed = [r for r in records if r["event"] == "step" and r["attempt"] == attempts[0] and r["batch"] <= 2]
    assert max(r["batch"] for r in committed) == 2 and not any(
        r["event"] == "step" and r["attempt"] == attempts[0] and r["batch"] > 2 for r in records)
    for epoch in range(EPOCHS):
        seen = Counter(i for r in records if r["event"] == "step" and r["epoch"] == epoch for i in r["ids"])
        assert sorted(seen) == list(range(NUM_EXAMPLES)) and set(seen.values()) == {1}, f"epoch {epoch}: {seen}"
    done = [r for r in records if r["event"] == "done"]
    assert len(done) == 2 and done[0]["checksum"] == done[1]["checksum"], done
