"""``stratagem run --nnodes MIN:MAX``: an elastic job; torch's elastic rendezvous says which hosts are in it.

One ``stratagem run`` per host runs that host's ``-n`` workers on the
supervisor's engine (``supervisor.start_workers`` and ``run_group``: rank
prefixes, workers that die with it, the first failure named with its
traceback). Which hosts are in the job, and this one's place, come from torch's
public rendezvous (``DynamicRendezvousHandler`` over a ``C10dRendezvousBackend``
that checks each state before torch unpickles it) on a store that the first
``stratagem run`` at ``--master-addr:--master-port`` serves, bound to that
address only, its values signed with the job's secret when it has one
(``_rendezvous.SignedStore``). A round closes 1 s after MIN hosts are
there, or at once with MAX.

When a worker fails, or a host waits to join (``num_nodes_waiting``), every host
stops its workers and meets again: a dead host drops out after 3 missed 1 s
heartbeats, and the job goes on with the hosts left (at least MIN) from the last
``BackupAndRestore`` backup. A restart after a failure uses one of
``--max-restarts``; a host joining costs none. At the end every host closes the
rendezvous and says it left; the host serving the store waits (at most the job's
timeout) until the others have, so none loses the store while it still needs it.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import tempfile
import time
import warnings
from typing import TYPE_CHECKING

from stratagem.distribute._interfaces import interface_address, is_loopback, route_interface
from stratagem.errors import ConfigurationError, WorkerFailedError
from stratagem.launcher import supervisor
from stratagem.launcher.environment import RESTART_COUNT_ENV

if TYPE_CHECKING:  # torch is imported when a job runs, not with the CLI
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousHandler

DEFAULT_TIMEOUT_S = 300.0
_LEFT_KEY = "stratagem/left"  # in a round's store: the hosts of that round that have ended
_OUTCOME_KEY = "stratagem/outcome"  # in the job's store: "succeeded" or "failed", set before closing it
_NPROC_KEY = "stratagem/nproc/{node_rank}"  # in a round's store: that host's worker count
_HEARTBEAT_STOP_S = 5.0  # leaving: the longest wait for this host's keep-alive thread (a call takes ms)
logger = logging.getLogger(__name__)


def parse_nnodes(text: str) -> tuple[int, int]:
    """``"2"`` -> (2, 2); ``"2:4"`` -> (2, 4), as torchrun's ``--nnodes``."""
    low, sep, high = text.partition(":")
    try:
        return int(low), int(high) if sep else int(low)
    except ValueError:
        raise ValueError(f"--nnodes takes N or MIN:MAX (whole numbers), as torchrun. Received: nnodes={text!r}") from None


def run(config: supervisor.LaunchConfig) -> int:
    """Runs this host's part of the job until it ends; returns 0 when it succeeded.

    Raises:
        WorkerFailedError: When a worker here failed and no restart was left;
            every worker here has been stopped, and the rendezvous is closed.
    """
    from torch.distributed.elastic.rendezvous import RendezvousError

    if config.max_restarts == 0:
        warnings.warn("An elastic job with --max-restarts 0 ends at the first lost host: going on without it is a "
                      "restart. Pass --max-restarts K to survive K losses.", stacklevel=2)
    timeout_s = config.timeout_s or DEFAULT_TIMEOUT_S
    try:
        membership = _Membership(config, timeout_s)
    except ConfigurationError as err:
        supervisor.say(str(err))
        return 1
    wait_for_others = True
    try:
        code = _run_rounds(config, membership, timeout_s)
        wait_for_others = code != 130  # Ctrl-C ends this host now
        return code
    except RendezvousError as err:
        wait_for_others = False  # the store is gone or unusable
        supervisor.say(membership.explain(err))
        return 1
    finally:
        membership.leave(wait_for_others=wait_for_others)


def _run_rounds(config: supervisor.LaunchConfig, membership: _Membership, timeout_s: float) -> int:
    """One start of this host's workers per round of the rendezvous, until the job ends."""
    failures, last_failure = 0, None
    for start in range(sys.maxsize):
        placement = membership.next_round(config.num_processes or 1)
        if placement is None:  # the job was ended on another host
            if last_failure is not None:
                raise last_failure
            if not membership.succeeded():
                raise WorkerFailedError(
                    "Another host ended the elastic job after a failure (its output names the worker); no worker "
                    "runs here.", rank=-1, exit_code=1, log_tail="")
            supervisor.say("the job finished on the other hosts")
            return 0
        with tempfile.TemporaryDirectory(prefix="stratagem-errors-") as error_dir:
            env = dict(os.environ) | {RESTART_COUNT_ENV: str(start)}
            workers = supervisor.start_workers(config.command, env, placement, timeout_s=timeout_s,
                                               error_dir=error_dir, local_job=False)
            try:
                code = supervisor.run_group(workers, world_size=placement.world_size,
                                            grace_period_s=config.grace_period_s, interrupted=membership.nodes_waiting)
            except WorkerFailedError as err:
                if failures == config.max_restarts:
                    membership.end(succeeded=False)
                    raise
                failures, last_failure = failures + 1, err
                logger.warning("%s", err)
                supervisor.say(f"worker rank {err.rank} failed (exit code {err.exit_code}); restarting the workers "
                               f"once the hosts meet again (restart {failures} of {config.max_restarts})")
                continue
        last_failure = None
        if code is None:
            supervisor.say("a host is waiting to join; restarting the workers to take it in (not counted as a restart)")
            continue
        if code == 0:
            membership.end(succeeded=True)
        return code  # 130: stopped by a signal; the others see this host's heartbeats stop
    raise AssertionError("unreachable: the loop returns or raises")


class _Membership:
    """This host's place in the job, from torch's rendezvous handler: one round per start of the workers."""

    def __init__(self, config: supervisor.LaunchConfig, timeout_s: float) -> None:
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler, RendezvousTimeout

        from stratagem.launcher._rendezvous_state import CheckedC10dBackend

        assert config.master_port is not None and config.max_nodes is not None, "LaunchConfig requires them"
        self._endpoint = f"{config.master_addr}:{config.master_port}"
        self._timeout_s = timeout_s
        self._store, self.serving = _open_store(config.master_addr, config.master_port, timeout_s)
        # NOTE: without this, rank 0's host would also serve a store for the workers, on every interface.
        os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        run_id = os.environ.get("STRATAGEM_RUN_ID", f"stratagem-{config.master_port}")
        timeouts = RendezvousTimeout(join=datetime.timedelta(seconds=timeout_s),
                                     last_call=datetime.timedelta(seconds=1), close=datetime.timedelta(seconds=10))
        # A dead host is noticed after 3 missed 1 s heartbeats.
        self._handler: RendezvousHandler = DynamicRendezvousHandler.from_backend(
            run_id, self._store, CheckedC10dBackend(self._store, run_id), config.nnodes, config.max_nodes,
            local_addr=_local_address(config.master_addr), timeout=timeouts, keep_alive_interval=1,
            keep_alive_max_attempt=3)
        self._round_store: dist.Store | None = None
        self._num_nodes = 0

    def next_round(self, nproc: int) -> supervisor.Placement | None:
        """Meets the other hosts; this host's workers' placement, or None when the job was ended (closed)."""
        from torch.distributed.elastic.rendezvous import RendezvousClosedError

        try:
            info = self._handler.next_rendezvous()
        except RendezvousClosedError:
            return None
        store, node_rank, self._num_nodes = info.store, info.rank, info.world_size
        self._round_store = store
        # Hosts may run different -n: each publishes its count, and ranks are numbered host by host.
        store.set(_NPROC_KEY.format(node_rank=node_rank), str(nproc))
        counts = [int(store.get(_NPROC_KEY.format(node_rank=r))) for r in range(info.world_size)]
        # Node rank 0 picked a free port for its rank 0, which serves the workers' store on its address.
        master = info.bootstrap_store_info
        assert master is not None, "torch's handler returns it"
        return supervisor.Placement(first_rank=sum(counts[:node_rank]), num_local=nproc, world_size=sum(counts),
                                    master_addr=master.master_addr, master_port=master.master_port)

    def nodes_waiting(self) -> bool:
        """Whether a host waits to join: the workers then restart to take it in."""
        return self._handler.num_nodes_waiting() > 0

    def succeeded(self) -> bool:
        """Whether the host that closed the rendezvous did so after its workers succeeded."""
        try:
            return self._store.check([_OUTCOME_KEY]) and self._store.get(_OUTCOME_KEY) == b"succeeded"
        except Exception:  # noqa: BLE001 -- the host that knew is gone: no success to report
            return False

    def end(self, *, succeeded: bool) -> None:
        """Closes the rendezvous (no host starts a new round) after the job succeeded or failed here for good.

        After this host's own success, trouble reaching the store is no failure:
        the host serving it may have ended first.
        """
        try:
            self._store.set(_OUTCOME_KEY, "succeeded" if succeeded else "failed")
            self._handler.set_closed()
        except Exception as err:  # noqa: BLE001 -- the outcome is decided: only say what happened
            logger.info("Could not close the rendezvous at %s: %s", self._endpoint, err)

    def leave(self, *, wait_for_others: bool) -> None:
        """Tells the others this host has left its last round; the host serving the store first waits for them.

        The wait ends when every other host of that round has left, or after the
        job's timeout, so no host still talking to the store loses it. Then this
        host's heartbeats stop (the rendezvous stays as it is).
        """
        try:
            if self._round_store is None:
                return
            if not self.serving:
                self._round_store.add(_LEFT_KEY, 1)
                return
            deadline = time.monotonic() + self._timeout_s
            while wait_for_others and time.monotonic() < deadline:
                if self._round_store.add(_LEFT_KEY, 0) >= self._num_nodes - 1:
                    return
                time.sleep(0.1)
        except Exception as err:  # noqa: BLE001 -- leaving: the outcome is decided already
            logger.info("Could not tell the rendezvous at %s that this host left: %s", self._endpoint, err)
        finally:
            from stratagem._torch_internals import stop_rendezvous_heartbeats

            # NOTE: the handler's keep-alive thread (a daemon) calls the store every second, in C++ with the GIL
            # released. One still running as the interpreter exits is ended by Python 3.11 with pthread_exit when it
            # takes the GIL back, an unwinding through torch's C++ frames that can abort the process: an agent exited
            # -6 ("terminate called without an active exception") after its job had finished, once, under load.
            stop_rendezvous_heartbeats(self._handler, timeout_s=_HEARTBEAT_STOP_S)

    def explain(self, err: BaseException) -> str:
        """One line for a rendezvous error: what happened and what to check."""
        from torch.distributed.elastic.rendezvous import RendezvousStateError, RendezvousTimeoutError

        forged = err.__cause__ if isinstance(err.__cause__, ConfigurationError) else None
        if forged is not None or isinstance(err, RendezvousStateError):
            return str(forged or err)
        if isinstance(err, RendezvousTimeoutError):
            return (f"the hosts did not meet at {self._endpoint} within {self._timeout_s:g}s: fewer than --nnodes MIN "
                    "joined. Start `stratagem run` with the same --nnodes, --master-addr and --master-port on the "
                    f"other hosts, or raise --timeout. Received: timeout_s={self._timeout_s:g}")
        return (f"lost the rendezvous store at {self._endpoint}: the `stratagem run` serving it (the first one "
                f"there) exited or cannot be reached, so the job cannot go on; its output says why. "
                f"Received: {type(err).__name__}: {err}")


def _open_store(master_addr: str, master_port: int, timeout_s: float) -> tuple[dist.Store, bool]:
    """The rendezvous store: served here when the endpoint is free on this host, else reached there.

    Returns the store (signed with the job's secret when it has one) and whether this process serves it.
    """
    import torch.distributed as dist

    from stratagem.distribute import _rendezvous, job_secret

    timeout = datetime.timedelta(seconds=timeout_s)
    listener = _rendezvous.listen_if_free(master_addr, master_port)
    store: dist.Store
    if listener is not None:
        store = dist.TCPStore(master_addr, master_port, is_master=True, timeout=timeout, wait_for_workers=False,
                              master_listen_fd=listener.detach())
    else:
        try:
            store = dist.TCPStore(master_addr, master_port, is_master=False, timeout=timeout)
        except (RuntimeError, dist.DistError) as err:
            raise ConfigurationError(
                f"No rendezvous answered at {master_addr}:{master_port} within {timeout_s:g}s. The first `stratagem "
                "run` of the job serves it on the host --master-addr names: start it there, and check that this "
                f"host reaches that address. Received: master_addr={master_addr!r}, master_port={master_port}"
            ) from None
    key = job_secret.store_signing_key()
    if key is not None:
        store = _rendezvous.SignedStore(store, key=key, where=f"stratagem run, store at {master_addr}:{master_port}")
    return store, listener is not None


def _local_address(master_addr: str) -> str:
    """The address the other hosts reach this one at: loopback for a loopback job, else the route's source."""
    if is_loopback(master_addr):
        return "127.0.0.1"
    name = route_interface(master_addr)
    address = interface_address(name) if name else None
    if address is None:
        raise ConfigurationError(
            f"Cannot tell which of this host's addresses reaches the rendezvous host {master_addr!r}. Check that "
            f"it resolves and is routable from here. Received: master_addr={master_addr!r}")
    return address
