"""Multi-host launcher flags and TF_CONFIG hosts: what --nnodes means alone, what it refuses, how output is labelled."""

from __future__ import annotations

import json
import sys

import pytest

from stratagem.errors import ConfigurationError, WorkerFailedError
from stratagem.launcher import cli, supervisor


def _config(*argv: str) -> supervisor.LaunchConfig:
    return cli.config_from_args(cli.build_parser().parse_args(["run", *argv]))


def test_nnodes_without_nproc_starts_one_process_per_host_as_torchrun() -> None:
    config = _config("--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29400", "t.py")
    assert (config.num_processes, config.nnodes, config.node_rank) == (1, 2, 1)
    assert config.command == (sys.executable, "t.py")


def test_nnodes_above_one_with_loopback_master_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"--master-addr.*Received: nnodes=2, master_addr='127.0.0.1'"):
        _config("--nnodes", "2", "--master-port", "29400", "t.py")
    with pytest.raises(ConfigurationError, match="master_addr='localhost'"):
        _config("-n", "2", "--nnodes", "3", "--master-addr", "localhost", "--master-port", "29400", "t.py")
    assert cli.main(["run", "--nnodes", "2", "--master-port", "29400", "t.py"]) == 2


def test_tf_config_host_is_labelled_with_its_global_rank() -> None:
    cluster = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], "ps": ["h3:2222"]}

    def place(task_type: str, index: int) -> tuple[int, str]:
        return supervisor.tf_config_place({"TF_CONFIG": json.dumps({"cluster": cluster,
                                                                    "task": {"type": task_type, "index": index}})})

    assert place("worker", 1) == (2, "rank 2")
    assert place("chief", 0) == (0, "rank 0")
    assert place("ps", 0) == (0, "ps 0")
    assert supervisor.tf_config_place({}) == (0, "worker")
    assert supervisor.tf_config_place({"TF_CONFIG": "{not json"}) == (0, "worker")  # the script reports it


def test_failed_tf_config_host_is_blamed_by_global_rank_and_world_size(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    script = "import sys; print('started'); sys.exit(3)"  # no torch: the launcher's labels are what is tested
    with pytest.raises(WorkerFailedError, match=r"Worker rank 2 \(of 3\) exited with code 3"):
        supervisor.run(supervisor.LaunchConfig(command=(sys.executable, "-c", script), num_processes=None))
    assert "[rank 2] started" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "pattern"), [
    (["--nnodes", "0"], r"nnodes \(--nnodes\) must be at least 1.*Received: nnodes=0"),
    (["-n", "2", "--master-port", "0"], r"--master-port\) must be a TCP port from 1 to 65535.*master_port=0"),
    (["-n", "2", "--master-port", "70000"], r"master_port=70000"),
    (["-n", "0"], r"num_processes \(-n\) must be at least 1.*Pass -n 1 or more"),
    (["--node-rank", "1"], r"pass --nnodes with --node-rank. Received: node_rank=1, nnodes=1"),
])
def test_bad_launcher_flag_is_refused_naming_flag_and_fix(argv: list[str], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        _config(*argv, "t.py")


def test_nnodes_min_max_builds_an_elastic_job_and_bad_ranges_are_refused() -> None:
    config = _config("--nnodes", "2:3", "--master-port", "29400", "--max-restarts", "2", "t.py")
    assert isinstance(config, supervisor.LaunchConfig) and config.max_nodes is not None
    assert (config.nnodes, config.max_nodes, config.num_processes, config.max_restarts) == (2, 3, 1, 2)
    fixed = _config("--nnodes", "2:2", "--master-addr", "10.0.0.1", "--master-port", "1", "t.py")
    assert fixed.max_nodes is None  # MIN == MAX is a fixed-size job
    with pytest.raises(ConfigurationError, match=r"1 <= MIN <= MAX.*min_nodes=3, max_nodes=2"):
        _config("--nnodes", "3:2", "--master-port", "29400", "t.py")
    with pytest.raises(ConfigurationError, match="needs --master-port"):
        _config("--nnodes", "1:3", "t.py")
    with pytest.raises(SystemExit):  # argparse prints "--nnodes takes N or MIN:MAX"
        _config("--nnodes", "2:x", "t.py")

