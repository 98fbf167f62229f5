"""The warm processes that stand in for `stratagem run`'s workers get the environment the launcher gives them.

The seed-example tests run most examples in warm processes (``launched_processes``, ``LocalPSCluster``) instead
of through the launcher; these checks keep that environment the launcher's, variable for variable, so a change
to the launcher's contract fails here instead of leaving the warm stand-in behind. No process starts: the
launcher's ``Popen`` and the warm ``ScriptProcess`` are replaced by recorders.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from stratagem._launched import ERROR_FILE_ENV
from stratagem.launcher import ps_job, supervisor
from stratagem.testing import ps_cluster, warm_processes

# Drawn afresh per job or per start (a port, a secret, a temporary file): compared by shape below, not by value.
PER_JOB = {"MASTER_PORT", "TF_CONFIG", "STRATAGEM_JOB_SECRET", ERROR_FILE_ENV}


class _ExitedProcess:
    """What the launcher needs of a Popen whose process ended at once with status 0; records its environment."""

    started: list[dict[str, str]] = []

    def __init__(self, command: list[str], *, env: dict[str, str], **_: Any) -> None:
        self.started.append(dict(env))
        self.args, self.pid, self.returncode = command, 0, 0
        self.stdout, self.stderr = io.BytesIO(), io.BytesIO()

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


class _RecordedScript:
    started: list[dict[str, str]] = []

    def __init__(self, command: list[str], *, env: dict[str, str], **_: Any) -> None:
        self.started.append(dict(env))


@pytest.fixture
def recorders(monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    monkeypatch.setattr(supervisor.subprocess, "Popen", _ExitedProcess)
    monkeypatch.setattr(warm_processes, "ScriptProcess", _RecordedScript)
    monkeypatch.setattr(ps_cluster, "ScriptProcess", _RecordedScript)
    monkeypatch.setattr(_ExitedProcess, "started", [])
    monkeypatch.setattr(_RecordedScript, "started", [])
    monkeypatch.setenv("SEED_EPOCHS", "2")  # a variable of the caller's, passed on by both
    return _ExitedProcess.started, _RecordedScript.started


def _task(env: dict[str, str]) -> tuple[dict[str, Any], int]:
    config = json.loads(env["TF_CONFIG"])
    return config["task"], sum(len(addresses) for addresses in config["cluster"].values())


def _assert_same_contract(launched: list[dict[str, str]], warm: list[dict[str, str]]) -> None:
    assert len(warm) == len(launched)
    for by_launcher, stand_in in zip(launched, warm):
        assert sorted(stand_in) == sorted(by_launcher), set(stand_in) ^ set(by_launcher)
        differing = {k for k in by_launcher if k not in PER_JOB and stand_in[k] != by_launcher[k]}
        assert not differing, {k: (by_launcher[k], stand_in[k]) for k in differing}
        assert _task(stand_in) == _task(by_launcher)
    assert len({env["STRATAGEM_JOB_SECRET"] for env in warm}) == 1, "one secret for the whole job"


def test_launched_processes_get_the_environment_stratagem_run_n_gives(recorders, tmp_path: Path) -> None:
    launched, warm = recorders
    assert supervisor.run(supervisor.LaunchConfig(command=(sys.executable, "train.py"), num_processes=2)) == 0
    warm_processes.launched_processes(["train.py"], 2, env=dict(os.environ), cwd=tmp_path,
                                      log_dir=tmp_path)
    _assert_same_contract(launched, warm)
    for env in warm:  # worker 0's address is the rendezvous, as the launcher's TF_CONFIG says
        assert json.loads(env["TF_CONFIG"])["cluster"]["worker"][0] == f"127.0.0.1:{env['MASTER_PORT']}"


def test_local_ps_cluster_tasks_get_the_environment_stratagem_run_ps_gives(recorders, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    launched, warm = recorders
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert ps_job.run(supervisor.LaunchConfig(command=(sys.executable, "train.py"), num_workers=2, num_ps=1)) == 0
    ps_cluster.LocalPSCluster("train.py", num_workers=2, num_ps=1, log_dir=tmp_path)
    by_task = {(t["type"], t["index"]): env for env in launched for t in [_task(env)[0]]}
    stand_ins = {(t["type"], t["index"]): env for env in warm for t in [_task(env)[0]]}
    assert sorted(stand_ins) == sorted(by_task)
    # The cluster adds the repository to PYTHONPATH (the tests' PS scripts import tests.dist) and the job's
    # secret when the caller has none, as the launcher does; the rest is the launcher's.
    for key in by_task:
        stand_ins[key].pop("PYTHONPATH", None), by_task[key].pop("PYTHONPATH", None)
    _assert_same_contract([by_task[k] for k in sorted(by_task)], [stand_ins[k] for k in sorted(by_task)])
    # The job's 4 tasks share this host's cores, as `-n 4` replicas would.
    assert {env["OMP_NUM_THREADS"] for env in launched} == {str(supervisor.threads_per_process(4))}


def test_warm_server_asks_nvml_whether_cuda_is_there_so_its_forks_can_use_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keras's import asks torch.cuda.is_available(); through CUDA's runtime that leaves every later fork of the server
    # unable to use CUDA ("Cannot re-initialize CUDA in forked subprocess": tests/dist/test_cuda.py on a GPU machine).
    import importlib

    assert warm_processes.PRELOAD[0] == "stratagem.testing._cuda_via_nvml"
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "0")
    importlib.reload(importlib.import_module("stratagem.testing._cuda_via_nvml"))
    assert os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
