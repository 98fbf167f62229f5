"""The elastic job's rounds without processes: what costs a restart, when the job ends, what ends it elsewhere."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from stratagem.distribute._rendezvous import listen_if_free
from stratagem.errors import WorkerFailedError
from stratagem.launcher import elastic, supervisor
from stratagem.launcher.ports import find_free_port

_PLACEMENT = supervisor.Placement(first_rank=0, num_local=1, world_size=2, master_addr="127.0.0.1", master_port=1)


class _FakeMembership:
    """Rounds that always form (or the job is closed), and a record of how this host ended it."""

    def __init__(self, *, closed_after: int | None = None, succeeded_elsewhere: bool = False) -> None:
        self.rounds, self.closed_after, self.succeeded_elsewhere = 0, closed_after, succeeded_elsewhere
        self.ended: list[bool] = []

    def next_round(self, nproc: int) -> supervisor.Placement | None:
        if self.closed_after is not None and self.rounds >= self.closed_after:
            return None
        self.rounds += 1
        return _PLACEMENT

    def nodes_waiting(self) -> bool:
        return False

    def succeeded(self) -> bool:
        return self.succeeded_elsewhere

    def end(self, *, succeeded: bool) -> None:
        self.ended.append(succeeded)


def _failure(rank: int) -> WorkerFailedError:
    return WorkerFailedError(f"Worker rank {rank} raised ValueError", rank=rank, exit_code=1, log_tail="")


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], list[object]]]:
    """(restart counts the workers saw, outcomes each start of the workers ends with: a code, None for a join, or an error)."""
    seen: list[str] = []
    outcomes: list[object] = []

    def start_workers(command, env, placement, **kwargs):
        seen.append(env[elastic.RESTART_COUNT_ENV])
        return []

    def run_group(workers, **kwargs):
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(supervisor, "start_workers", start_workers)
    monkeypatch.setattr(supervisor, "run_group", run_group)
    yield seen, outcomes


def _config(max_restarts: int) -> supervisor.LaunchConfig:
    return supervisor.LaunchConfig(command=("x",), nnodes=1, max_nodes=3, num_processes=1, master_addr="127.0.0.1",
                                   master_port=1, max_restarts=max_restarts)


def test_host_joining_costs_no_restart_and_a_failure_costs_one(starts) -> None:
    seen, outcomes = starts
    outcomes += [None, None, _failure(1), 0]  # two joins, a failure, then success
    membership = _FakeMembership()
    assert elastic._run_rounds(_config(max_restarts=1), membership, 60.0) == 0
    assert seen == ["0", "1", "2", "3"] and membership.ended == [True]


def test_failure_with_no_restart_left_closes_the_job_and_names_the_rank(starts) -> None:
    seen, outcomes = starts
    outcomes += [None, _failure(1), _failure(0)]
    membership = _FakeMembership()
    with pytest.raises(WorkerFailedError, match="rank 0"):
        elastic._run_rounds(_config(max_restarts=1), membership, 60.0)
    assert membership.ended == [False] and len(seen) == 3


def test_job_closed_elsewhere_reports_this_hosts_failure_or_the_others_outcome(starts) -> None:
    _, outcomes = starts
    outcomes += [_failure(1)]  # this host's workers failed, then the others ended the job
    with pytest.raises(WorkerFailedError, match="rank 1"):
        elastic._run_rounds(_config(max_restarts=2), _FakeMembership(closed_after=1, succeeded_elsewhere=True), 60.0)
    # A host that never ran: the job's outcome is the others'.
    assert elastic._run_rounds(_config(max_restarts=2), _FakeMembership(closed_after=0, succeeded_elsewhere=True), 60.0) == 0
    with pytest.raises(WorkerFailedError, match="Another host ended the elastic job after a failure"):
        elastic._run_rounds(_config(max_restarts=2), _FakeMembership(closed_after=0), 60.0)


def test_rendezvous_listener_is_taken_only_once_and_only_on_the_address() -> None:
    first = listen_if_free("127.0.0.1", 0)
    assert first is not None
    port = first.getsockname()[1]
    try:
        assert first.getsockname()[0] == "127.0.0.1"
        assert listen_if_free("127.0.0.1", port) is None  # another process serves it: this one connects
        with pytest.raises(OSError, match="Cannot listen"):
            listen_if_free("no-such-host.invalid", port)
    finally:
        first.close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # closed means free again


@pytest.mark.timeout(60)
def test_leaving_stops_this_hosts_heartbeat_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # A keep-alive thread still calling the store as the interpreter exits can abort it (elastic.py, leave).
    monkeypatch.setenv("STRATAGEM_RUN_ID", "heartbeat-test")
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # the membership sets it for the process
    config = supervisor.LaunchConfig(command=("true",), nnodes=1, max_nodes=2, master_port=find_free_port(),
                                     timeout_s=30.0)

    def heartbeats() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("RendezvousKeepAliveTimer")]

    before = set(heartbeats())
    membership = elastic._Membership(config, 30.0)
    assert membership.next_round(1) is not None  # one host of 1..2: the round closes after its last call (1 s)
    started = [t for t in heartbeats() if t not in before]
    assert len(started) == 1 and started[0].is_alive()
    membership.end(succeeded=True)
    membership.leave(wait_for_others=True)
    assert not started[0].is_alive()
