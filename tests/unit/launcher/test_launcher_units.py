"""Launcher logic that needs no worker process: argument parsing, env contract, error files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from stratagem.launcher import cli, supervisor
from stratagem.launcher.environment import local_tf_configs, worker_env
from stratagem._launched import read_error_file


def test_run_arguments_build_a_launch_config() -> None:
    args = cli.build_parser().parse_args(["run", "-n", "4", "--timeout", "30", "train.py", "--epochs", "3"])
    config = cli.config_from_args(args)
    assert config.command == (sys.executable, "train.py", "--epochs", "3")
    assert (config.num_processes, config.timeout_s, config.master_addr) == (4, 30.0, "127.0.0.1")


def test_module_target_runs_with_dash_m() -> None:
    config = cli.config_from_args(cli.build_parser().parse_args(["run", "-n", "2", "-m", "pkg.train", "--lr", "1"]))
    assert config.command == (sys.executable, "-m", "pkg.train", "--lr", "1")


def test_multi_host_without_master_port_is_rejected() -> None:
    args = cli.build_parser().parse_args(["run", "-n", "2", "--nnodes", "2", "--master-addr", "10.0.0.1", "t.py"])
    with pytest.raises(ValueError, match="same --master-port on every host"):
        cli.config_from_args(args)
    assert cli.main(["run", "-n", "2", "--nnodes", "2", "t.py"]) == 2


def test_node_rank_out_of_range_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"Received: node_rank=2"):
        supervisor.LaunchConfig(command=("x",), nnodes=2, node_rank=2, master_port=1234)


def test_worker_env_names_every_variable_of_the_contract() -> None:
    env = worker_env(rank=3, world_size=4, local_rank=1, local_world_size=2, master_addr="127.0.0.1",
                     master_port=2345, timeout_s=7.5)
    assert env == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "2345", "STRATAGEM_LAUNCHED": "1",
                   "PYTHONUNBUFFERED": "1", "STRATAGEM_TIMEOUT_S": "7.5",
                   "HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
                   "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2"}


def test_local_tf_configs_name_the_same_job_as_the_torch_variables() -> None:
    from stratagem.distribute.cluster import TFConfigClusterResolver, TorchrunClusterResolver

    configs = local_tf_configs(3, host="127.0.0.1", master_port=2345)
    assert [json.loads(c)["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    for rank, config in enumerate(configs):
        from_tf = TFConfigClusterResolver({"TF_CONFIG": config})
        from_torch = TorchrunClusterResolver(worker_env(rank=rank, world_size=3, local_rank=rank, local_world_size=3,
                                                        master_addr="127.0.0.1", master_port=2345, timeout_s=None))
        fields = ("rank", "world_size", "local_rank", "local_world_size", "master_addr", "master_port")
        assert [getattr(from_tf, f) for f in fields] == [getattr(from_torch, f) for f in fields], rank


def test_uncaught_exception_is_recorded_in_torch_record_layout_and_read_back(tmp_path: Path) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    path = tmp_path / "rank0.json"
    code = ("from stratagem._launched import install_excepthook; install_excepthook()\n"
            "def load():\n    raise KeyError('missing thing')\nload()")
    proc = subprocess.run([sys.executable, "-c", code], env={"TORCHELASTIC_ERROR_FILE": str(path), "PATH": ""},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "KeyError" in proc.stderr  # the usual traceback still prints
    record = read_error_file(str(path))
    assert record is not None and record.message == "KeyError: 'missing thing'"
    # The script's frames only, innermost last, as Python prints them.
    assert record.traceback.startswith("Traceback") and "in load" in record.traceback
    assert "_record" not in record.traceback and record.traceback.rstrip().endswith("KeyError: 'missing thing'")
    # torch's elastic agent reads the same file for its root-cause report.
    failure = ProcessFailure(local_rank=0, pid=proc.returncode, exitcode=1, error_file=str(path))
    assert failure.message["message"] == "KeyError: 'missing thing'" and failure.timestamp > 0


def test_unreadable_or_foreign_error_file_reads_as_none(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "flat.json").write_text(json.dumps({"time": 1.0, "type": "E", "message": "not torch's layout"}))
    for name in ("bad.json", "list.json", "flat.json", "absent.json"):
        assert read_error_file(str(tmp_path / name)) is None, name


def test_root_cause_is_the_earliest_recorded_exception(tmp_path: Path) -> None:
    def worker(rank: int, written_ns: int | None, code: int = 1) -> SimpleNamespace:
        path = tmp_path / f"rank{rank}.json"
        if written_ns is not None:
            # torch's timestamp is whole seconds and equal here: the write time decides.
            path.write_text(json.dumps({"message": {"message": f"E: {rank}", "extraInfo": {
                "py_callstack": "", "timestamp": "1700000000"}}}))
            os.utime(path, ns=(written_ns, written_ns))
        return SimpleNamespace(rank=rank, error_file=str(path), process=SimpleNamespace(returncode=code))

    second = 1_700_000_000 * 10**9
    workers = [worker(0, second + 20_000_000), worker(1, second + 10_000_000), worker(2, None)]
    assert supervisor._root_cause(workers[0], workers, set()).rank == 1  # type: ignore[arg-type]
    no_records = [worker(5, None), worker(6, None)]
    assert supervisor._root_cause(no_records[1], no_records, set()).rank == 6  # type: ignore[arg-type]
    # Killed by a signal nobody here sent: the cause, even though its peer raised first on record.
    preempted = [worker(7, second), worker(8, None, code=-9), worker(9, None, code=-15)]
    assert supervisor._root_cause(preempted[0], preempted, {9}).rank == 8  # type: ignore[arg-type]
    assert supervisor.describe_exit(workers[1]) == ("raised E: 1", 1)  # type: ignore[arg-type]


def test_free_ports_for_one_job_are_distinct() -> None:
    from stratagem.launcher.environment import ps_cluster_configs
    from stratagem.launcher.ports import find_free_ports

    assert len(set(find_free_ports(64))) == 64
    configs = ps_cluster_configs(num_workers=4, num_ps=3)
    cluster = json.loads(next(iter(configs.values())))["cluster"]
    addresses = [address for role in cluster.values() for address in role]
    assert len(addresses) == 8 and len(set(addresses)) == 8  # the cluster spec refuses a shared address
