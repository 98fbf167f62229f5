"""horovodrun's -np, -H and --hostfile on `stratagem run`, mapped onto -n/--nnodes/--node-rank/--master-addr."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from stratagem.errors import ConfigurationError
from stratagem.launcher import cli
from stratagem.launcher.hosts import HostSlots, parse_hosts, read_hostfile


def _config(*flags: str):  # type: ignore[no-untyped-def]
    return cli.config_from_args(cli.build_parser().parse_args(["run", *flags, "train.py"]))


def test_np_alone_is_n_processes_on_this_host() -> None:
    config = _config("-np", "3")
    assert (config.num_processes, config.nnodes, config.master_addr) == (3, 1, "127.0.0.1")


def test_local_host_list_starts_np_processes_here() -> None:
    config = _config("-np", "2", "-H", "localhost:4")
    assert (config.num_processes, config.nnodes, config.node_rank) == (2, 1, 0)


def test_two_hosts_become_nnodes_with_this_host_found_in_the_list() -> None:
    # This machine is the second host: the first is an address no local interface has (TEST-NET-2).
    config = _config("-np", "4", "-H", f"198.51.100.1:2,{socket.gethostname()}:2", "--master-port", "29500")
    assert (config.num_processes, config.nnodes, config.node_rank) == (2, 2, 1)
    assert (config.master_addr, config.master_port) == ("198.51.100.1", 29500)


def test_explicit_node_rank_wins_and_hostfile_reads_slots(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the job\n198.51.100.1 slots=2\n198.51.100.2:2  # second\n\n")
    assert read_hostfile(str(hostfile)) == [HostSlots("198.51.100.1", 2), HostSlots("198.51.100.2", 2)]
    config = _config("--hostfile", str(hostfile), "--node-rank", "0", "--master-port", "29500")
    assert (config.num_processes, config.nnodes, config.node_rank, config.master_addr) == (2, 2, 0, "198.51.100.1")


def test_unequal_shares_are_refused_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match="same number of processes on every host.*198.51.100.2: 1"):
        _config("-np", "3", "-H", "198.51.100.1:2,198.51.100.2:2", "--node-rank", "0", "--master-port", "1")


@pytest.mark.parametrize("flags, message", [
    (("-np", "5", "-H", "localhost:4"), "between 1 and the 4 slots"),
    (("-H", "localhost:0"), "positive integer"),
    (("-H", "a:1,a:1"), "repeated=\\['a'\\]"),
    (("-H", "localhost:2", "--nnodes", "2"), "--nnodes cannot be added"),
    (("-H", "198.51.100.1:1,198.51.100.2:1", "--master-port", "1"), "Pass --node-rank"),
])
def test_bad_host_flags_raise_configuration_error(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _config(*flags)


def test_missing_hostfile_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="Cannot read the hostfile.*--hostfile="):
        _config("--hostfile", str(tmp_path / "absent"))
    assert parse_hosts("h1, h2:3") == [HostSlots("h1", 1), HostSlots("h2", 3)]
