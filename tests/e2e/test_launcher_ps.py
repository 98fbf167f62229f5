"""`stratagem run --ps P --workers W`: a parameter-server job as real subprocesses, and its flags.

How such a job stops (a failing chief, workers with no restarts left, a stopped launcher) is in
test_launcher_ps_stop.py.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e._processes import assert_all_gone, children, ps_job_env

from stratagem.errors import ConfigurationError
from stratagem.launcher import cli, ps_job

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CUSTOM_LOOP = ROOT / "tests" / "dist" / "ps_scripts" / "custom_loop.py"
LAUNCH = [sys.executable, "-m", "stratagem.launcher.cli", "run"]

# Announces each start; worker 1 crashes on its first start, before it builds the
# strategy. Otherwise it runs the script in argv[1] with the rest of argv.
FLAKY_SCRIPT = """
import json, os, runpy, sys
task = json.loads(os.environ["TF_CONFIG"])["task"]
restarts = os.environ["STRATAGEM_RESTART_COUNT"]
print(f"{task['type']} {task['index']} starts, restart count {restarts}", flush=True)
if task == {"type": "worker", "index": 1} and restarts == "0":
    os._exit(3)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# Trains until it is stopped; the chief prints each step it fetched.
ENDLESS_SCRIPT = """
import torch
import stratagem

strategy = stratagem.distribute.ParameterServerStrategy()
coordinator = stratagem.distribute.ClusterCoordinator(strategy)
with strategy.scope():
    net = torch.nn.Linear(2, 1)
    module = strategy.distribute_module(net)
    optimizer = strategy.distribute_optimizer(torch.optim.SGD(net.parameters(), lr=0.01))

def step():
    optimizer.zero_grad()
    loss = module(torch.ones(4, 2)).pow(2).mean()
    loss.backward()
    optimizer.step()
    return loss.detach()

for i in range(1_000_000):
    coordinator.schedule(step).fetch()
    if strategy.is_chief:
        print(f"step {i}", flush=True)
"""

def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- flags: no processes ---------------------------------------------------------------
def test_ps_and_workers_build_a_ps_job_config() -> None:
    args = cli.build_parser().parse_args(
        ["run", "--ps", "2", "--workers", "3", "--max-restarts", "1", "-m", "pkg.train", "--lr", "1"])
    config = cli.config_from_args(args)
    assert config.command == (sys.executable, "-m", "pkg.train", "--lr", "1")
    assert (config.num_ps, config.num_workers, config.max_restarts, config.master_addr) == (2, 3, 1, "127.0.0.1")


def test_ps_without_workers_raises_configuration_error_naming_both_flags() -> None:
    args = cli.build_parser().parse_args(["run", "--ps", "1", "t.py"])
    with pytest.raises(ConfigurationError, match=r"--ps and --workers go together.*Received: ps=1, workers=None"):
        cli.config_from_args(args)
    assert cli.main(["run", "--workers", "2", "t.py"]) == 2


@pytest.mark.parametrize("flag", [["-n", "2"], ["--nnodes", "2"], ["--master-port", "2345"]])
def test_ps_job_with_torchrun_flags_raises_configuration_error(flag: list[str]) -> None:
    args = cli.build_parser().parse_args(["run", "--ps", "1", "--workers", "1", *flag, "t.py"])
    with pytest.raises(ConfigurationError, match=rf"{flag[0]} cannot be combined.*Received: {flag[0]}={flag[1]}"):
        cli.config_from_args(args)


@pytest.mark.parametrize(("ps", "workers"), [("0", "1"), ("1", "0")])
def test_zero_ps_or_workers_raises_configuration_error(ps: str, workers: str) -> None:
    args = cli.build_parser().parse_args(["run", "--ps", ps, "--workers", workers, "t.py"])
    with pytest.raises(ConfigurationError, match=rf"at least one worker.*Received: num_workers={workers}, num_ps={ps}"):
        cli.config_from_args(args)


def test_ps_task_in_tf_config_runs_the_server_instead_of_the_script(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = {"chief": ["h0:1"], "worker": ["h1:1"], "ps": ["h2:1", "h3:1"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 1}}))
    config = cli.config_from_args(cli.build_parser().parse_args(["run", "train.py", "--epochs", "3"]))
    assert config.command == ps_job.SERVER_COMMAND
    assert "TF_CONFIG names this process ps 1" in capsys.readouterr().err
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    config = cli.config_from_args(cli.build_parser().parse_args(["run", "train.py"]))
    assert config.command == (sys.executable, "train.py")


# ---- jobs --------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_ps_job_trains_and_exits_zero_with_task_prefixes(tmp_path: Path) -> None:
    # One worker: each task is an interpreter of its own (~4 s of CPU to start); the next test runs two.
    out = tmp_path / "out.json"
    proc = subprocess.run([*LAUNCH, "--ps", "1", "--workers", "1", str(CUSTOM_LOOP), "sgd", "12", str(out)],
                          env=ps_job_env(), capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[ps 0] stratagem: ps 0 serving on 127.0.0.1:" in proc.stdout
    assert len(json.loads(out.read_text())["losses"]) == 12


@pytest.mark.timeout(120)
def test_worker_crashing_on_first_start_is_restarted_alone_and_job_exits_zero(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    script = _write(tmp_path, "flaky.py", FLAKY_SCRIPT)
    proc = subprocess.run([*LAUNCH, "--ps", "1", "--workers", "2", "--max-restarts", "1", str(script),
                           str(CUSTOM_LOOP), "sgd", "12", str(out)],
                          env=ps_job_env(), capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stratagem: worker 1 exited with code 3; restarting it alone in 1s (restart 1 of 1)" in proc.stderr
    assert "[worker 1] worker 1 starts, restart count 1" in proc.stdout
    assert proc.stdout.count("restart count 1") == 1, "only worker 1 is restarted"
    assert "[chief] chief 0 starts, restart count 0" in proc.stdout
    assert len(json.loads(out.read_text())["losses"]) == 12


@pytest.mark.timeout(120)
def test_killed_ps_stops_the_job_with_nonzero_exit_naming_it(tmp_path: Path) -> None:
    script = _write(tmp_path, "endless.py", ENDLESS_SCRIPT)
    proc = subprocess.Popen([*LAUNCH, "--ps", "1", "--workers", "1", "--grace-period", "2", str(script)],
                            env=ps_job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        deadline = time.monotonic() + 60
        while not any(line.startswith("[chief] step 3") for line in output):
            assert time.monotonic() < deadline, "".join(output)[-3000:]
            try:
                output.append(lines.get(timeout=1))
            except queue.Empty:
                pass
        tasks = children(proc.pid)
        servers = [pid for pid, command in tasks.items() if "stratagem.distribute.ps.serve" in command]
        assert len(servers) == 1, tasks
        os.kill(servers[0], signal.SIGKILL)  # mid-training: the chief has fetched 4 steps
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)  # let the reader drain the pipe
    while not lines.empty():
        output.append(lines.get())
    text = "".join(output)
    assert code == 128 + signal.SIGKILL, text[-3000:]
    assert ("stratagem: ps 0 was killed by SIGKILL while the chief was running: parameter-server state is lost"
            in text), text[-3000:]
    assert_all_gone(list(tasks))
