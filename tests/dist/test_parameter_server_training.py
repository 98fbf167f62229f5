"""ParameterServerStrategy end to end: real chief, worker and server processes on loopback.

- one worker, staleness 0: the same numbers as plain single-process training;
- two workers: Model.fit on the shipped digits lands within 2 points of synchronous training;
- a worker SIGKILLed while it holds a step: training finishes, every step is
  applied exactly once on every server, and the restarted worker rejoins;
- a parameter server that dies stops the job with an error naming it, and
  the job resumes from BackupAndRestore.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from stratagem.testing.ps_cluster import ROOT, LocalPSCluster
from stratagem.testing.warm_processes import ScriptProcess
from tests.dist._models import small_cnn
from tests.dist.ps_scripts import fit_digits
from tests.dist.ps_scripts.custom_loop import batches, make_optimizer

pytestmark = pytest.mark.dist
SCRIPTS = Path(__file__).parent / "ps_scripts"


def _reference(optimizer_name: str, steps: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    net = small_cnn()
    optimizer = make_optimizer(optimizer_name, net.parameters())
    losses = []
    for x, y in batches(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return net.state_dict(), losses


def _run_to_end(cluster: LocalPSCluster, timeout_s: float) -> None:
    assert cluster.wait("chief", 0, timeout_s) == 0, cluster.logs()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_worker_staleness_zero_matches_single_process(tmp_path: Path, optimizer: str) -> None:
    steps = 20
    out = tmp_path / "out.json"
    with LocalPSCluster(SCRIPTS / "custom_loop.py", num_workers=1, num_ps=2, log_dir=tmp_path,
                        args=(optimizer, str(steps), str(out)), env={"TEST_STALENESS": "0"}) as cluster:
        _run_to_end(cluster, 100)
    result = json.loads(out.read_text())
    state, losses = _reference(optimizer, steps)
    for name, expected in state.items():
        torch.testing.assert_close(torch.tensor(result["state"][name]), expected, rtol=0, atol=1e-5,
                                   msg=lambda m: f"{optimizer}, {name}: {m}")
    np.testing.assert_allclose(result["losses"], losses, rtol=0, atol=1e-5)
    assert result["done"] is True
    assert max(float((torch.tensor(result["state"][k]) - v).abs().max()) for k, v in small_cnn().state_dict().items()) > 1e-3
    for server in result["servers"]:  # every step applied once on each server, none dropped
        assert server["applied_steps"] == list(range(steps)) and server["stale_dropped"] == 0


@pytest.mark.timeout(120)
def test_error_in_a_step_stops_the_chief_with_the_workers_traceback(tmp_path: Path) -> None:
    with LocalPSCluster(SCRIPTS / "custom_loop.py", num_workers=1, num_ps=1, log_dir=tmp_path,
                        args=("sgd", "10", str(tmp_path / "out.json")), env={"TEST_FAIL_AT": "4"}) as cluster:
        assert cluster.wait("chief", 0, 100) != 0
        assert cluster.wait("worker", 0, 30) != 0
    chief = (tmp_path / "chief0.log").read_text()
    assert "CoordinatorError" in chief and "failed on worker 0" in chief
    assert "ValueError: boom in call 4" in chief and "train_step" in chief, chief[-3000:]


@pytest.mark.timeout(240)
def test_two_workers_fit_digits_within_two_points_of_synchronous(tmp_path: Path) -> None:
    out, sync_out = tmp_path / "ps.json", tmp_path / "sync.json"
    with LocalPSCluster(SCRIPTS / "fit_digits.py", num_workers=2, num_ps=2, log_dir=tmp_path,
                        args=("ps", str(out))) as cluster:
        _run_to_end(cluster, 200)
    reference = ScriptProcess([str(SCRIPTS / "fit_digits.py"), "sync", str(sync_out)],
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, log_path=tmp_path / "sync.log")
    try:
        assert reference.wait(120) == 0, (tmp_path / "sync.log").read_text()[-3000:]
    finally:
        reference.kill()  # a no-op once it has ended
    ps, sync = json.loads(out.read_text()), json.loads(sync_out.read_text())
    assert sync["evaluate"]["accuracy"] > 0.8, "the reference must learn for the comparison to mean anything"
    assert abs(ps["evaluate"]["accuracy"] - sync["evaluate"]["accuracy"]) <= 0.02, (ps["evaluate"], sync["evaluate"])
    assert len(ps["history"]["val_accuracy"]) == fit_digits.EPOCHS  # validation on the chief, each epoch
    assert ps["history"]["val_accuracy"][-1] == pytest.approx(sync["history"]["val_accuracy"][-1], abs=0.03)
    runs = {w: v["closures_run"] for w, v in ps["coordinator"]["workers"].items()}
    assert len(runs) == 2 and all(count > 0 for count in runs.values()), f"both workers must train: {runs}"
    total_steps = len(ps["history"]["loss"]) * fit_digits.STEPS
    assert sum(runs.values()) == total_steps
    assert [s["pushes_applied"] for s in ps["servers"]] == [total_steps] * 2


@pytest.mark.timeout(120)
def test_workers_follow_the_chiefs_decision_to_stop(tmp_path: Path) -> None:
    out = tmp_path / "ps.json"
    with LocalPSCluster(SCRIPTS / "fit_digits.py", num_workers=1, num_ps=1, log_dir=tmp_path,
                        args=("ps", str(out)), env={"TEST_STOP_AFTER": "0"}) as cluster:
        _run_to_end(cluster, 100)
        assert cluster.wait("worker", 0, 30) == 0, cluster.logs()  # the worker stopped with the chief
    assert len(json.loads(out.read_text())["history"]["loss"]) == 1


def _wait_for(path: Path, cluster: LocalPSCluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path.name} did not appear within {timeout_s}s\n{cluster.logs()}")
        time.sleep(0.05)


@pytest.mark.timeout(240)
def test_killed_worker_steps_are_rescheduled_applied_once_and_restarted_worker_rejoins(tmp_path: Path) -> None:
    out, markers = tmp_path / "out.json", tmp_path / "markers"
    markers.mkdir()
    with LocalPSCluster(SCRIPTS / "kill_worker.py", num_workers=2, num_ps=2, log_dir=tmp_path,
                        args=(str(out), str(markers)), env={"STRATAGEM_WORKER_TIMEOUT_S": "5"}) as cluster:
        _wait_for(markers / "holding", cluster, 90)  # worker 1 pushed a step and holds it
        cluster.processes[("worker", 1)].send_signal(signal.SIGKILL)
        _wait_for(markers / "phase1_done", cluster, 90)  # the rest ran on worker 0 alone
        assert cluster.processes[("worker", 1)].poll() == -signal.SIGKILL
        cluster.start("worker", 1)  # STRATAGEM_RESTART_COUNT=1
        _run_to_end(cluster, 120)
    result = json.loads(out.read_text())
    total = 40 + 20
    for server in result["servers"]:
        assert server["applied_steps"] == list(range(total)), "every scheduled step applied, none lost"
        assert server["pushes_applied"] == total, "no step applied twice"
        # The killed worker's step was pushed again by its re-run (more, if a loaded machine made a
        # live worker look dead for a moment: still applied once each, which is the point).
        assert server["duplicates_refused"] >= 1
    phase1, phase2 = result["ran_by"][:40], result["ran_by"][40:]
    assert [1, 0] in phase1 and [0, 0] in phase1  # both workers worked before the kill
    assert [1, 1] in phase2, "the restarted worker (incarnation 1) ran steps after rejoining"


@pytest.mark.timeout(240)
def test_dead_server_stops_job_naming_it_and_job_resumes_from_backup(tmp_path: Path) -> None:
    backup, out, markers = tmp_path / "backup", tmp_path / "out.json", tmp_path / "markers"
    markers.mkdir()
    env = {"STRATAGEM_TIMEOUT_S": "20"}
    first = tmp_path / "first"
    first.mkdir()
    with LocalPSCluster(SCRIPTS / "fit_backup.py", num_workers=1, num_ps=2, log_dir=first,
                        args=(str(backup), str(out), str(markers)), env=env) as cluster:
        _wait_for(markers / "epoch_1_done", cluster, 120)
        cluster.processes[("ps", 1)].send_signal(signal.SIGKILL)
        assert cluster.wait("chief", 0, 120) != 0
        chief_log = (first / "chief0.log").read_text()
    assert "ps 1" in chief_log and "BackupAndRestore" in chief_log, chief_log[-3000:]
    assert not out.exists()
    second = tmp_path / "second"
    second.mkdir()
    with LocalPSCluster(SCRIPTS / "fit_backup.py", num_workers=1, num_ps=2, log_dir=second,
                        args=(str(backup), str(out), str(markers)), env=env) as cluster:
        _run_to_end(cluster, 150)
    result = json.loads(out.read_text())
    assert result["restored_from"] is not None, "the second run must resume from the backup"
    # The kill lands after epoch 1's marker, before or after that epoch's backup: the rerun
    # starts after the last backed-up epoch (1 or 2), never from scratch.
    first_epoch = result["epochs_run"][0]
    assert first_epoch in (1, 2), f"epochs already backed up are not repeated: {result['epochs_run']}"
    assert result["epochs_run"] == list(range(first_epoch, 5)) and result["evaluate"]["accuracy"] > 0.8
