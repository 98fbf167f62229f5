"""Start, watch and stop the worker processes of one job on this host: stratagem's one launch engine.

Each worker's output is passed through line by line with a ``[rank r]``
prefix. The first worker to fail stops the job: the others are terminated
(SIGTERM, then SIGKILL after a grace period), and ``WorkerFailedError``
carries the failing rank, its exit code and the last lines of its stderr.
Workers die with the supervisor (Linux ``PR_SET_PDEATHSIG``), so no orphan
survives it, even when the supervisor itself is killed. ``run`` drives one
fixed-size job (``-n``, static ``--nnodes``, ``-H``); an elastic job
(``--nnodes MIN:MAX``, ``elastic.py``) drives the same ``start_workers`` and
``run_group`` once per round of torch's rendezvous.

NOTE: torch's elastic agent is not used, because the agent of torch 2.13 breaks
promises this module keeps: its rendezvous store listens on every interface
(``*:PORT``), its workers start in their own session without a parent-death
signal (they outlive a SIGKILLed launcher), a failure or restart gives the
others a fixed 30 s before SIGKILL, it cannot tell a SIGSTOPped rank from a
dead one, and its workers share one environment (no per-replica ``TF_CONFIG``).
Workers record their uncaught exception in torch's ``@record`` layout
(``stratagem._launched``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Literal

from stratagem._process import die_with_parent
from stratagem.distribute import job_secret
from stratagem.distribute.cluster import TFConfigClusterResolver
from stratagem.distribute._interfaces import is_loopback
from stratagem.errors import ConfigurationError, WorkerFailedError
from stratagem.launcher.environment import RESTART_COUNT_ENV, local_tf_configs, threads_per_process, worker_env
from stratagem._launched import ERROR_FILE_ENV, read_error_file
from stratagem.launcher.ports import check_resolvable, find_free_port

TAIL_LINES = 20
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchConfig:
    """What to start: ``command`` once per local process.

    Args:
        command: The worker command line, e.g. ``(sys.executable, "train.py", "--epochs", "3")``.
        num_processes: Processes (replicas) on this host; ``None`` starts one
            process and passes ``TF_CONFIG`` through (TensorFlow-style multi-host).
        nnodes: Hosts in the job.
        node_rank: Index of this host.
        master_addr: Address of rank 0's rendezvous; loopback by default.
        master_port: Its port; a free one is picked on single-host jobs.
        timeout_s: Rendezvous and collective timeout given to the workers.
        grace_period_s: How long stopped workers get before SIGKILL.
        max_restarts: How often the whole group is restarted after a failure.
        max_nodes: Set (with ``nnodes`` the fewest hosts): an elastic job of ``nnodes``
            to ``max_nodes`` hosts, run by ``elastic.run``; ``node_rank`` is then the rendezvous's.
        num_ps: Set (with ``num_workers``): a parameter-server job on this host, run by
            ``ps_job.run``: the chief and ``num_workers`` workers run ``command`` and
            ``num_ps`` servers run none, on free ports of ``master_addr``; each worker
            is restarted alone, up to ``max_restarts`` times.
        num_workers: The workers of a parameter-server job, besides the chief.
    """

    command: tuple[str, ...]
    num_processes: int | None = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    timeout_s: float | None = None
    grace_period_s: float = 5.0
    max_restarts: int = 0
    max_nodes: int | None = None
    num_ps: int | None = None
    num_workers: int | None = None

    def __post_init__(self) -> None:
        if (self.num_ps is not None or self.num_workers is not None) and min(self.num_ps or 0, self.num_workers or 0) < 1:
            raise ConfigurationError(
                "A parameter-server job needs at least one worker (to run steps) and one ps task (to hold the "
                "variables). Pass --workers W --ps P with W, P >= 1. "
                f"Received: num_workers={self.num_workers}, num_ps={self.num_ps}")
        if self.max_nodes is not None and not 1 <= self.nnodes <= self.max_nodes:
            raise ConfigurationError(
                "--nnodes MIN:MAX needs 1 <= MIN <= MAX: the fewest and the most hosts the job runs on. "
                f"Received: min_nodes={self.nnodes}, max_nodes={self.max_nodes}")
        if self.max_nodes is not None and self.master_port is None:
            raise ConfigurationError(
                "An elastic job (--nnodes MIN:MAX) needs --master-port: every host's `stratagem run` meets at "
                "--master-addr:--master-port, so all must name the same one. Received: master_port=None")
        if self.num_processes is not None and self.num_processes < 1:
            raise ValueError("num_processes (-n) must be at least 1: the processes (replicas) to start on this host. "
                             f"Pass -n 1 or more. Received: num_processes={self.num_processes}")
        if self.nnodes < 1:
            raise ValueError(f"nnodes (--nnodes) must be at least 1: the hosts in the job. Received: nnodes={self.nnodes}")
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise ValueError("master_port (--master-port) must be a TCP port from 1 to 65535; leave it out on one "
                             f"host to get a free one. Received: master_port={self.master_port}")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0. Received: max_restarts={self.max_restarts}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"timeout_s (--timeout) must be a positive number of seconds. Received: timeout_s={self.timeout_s}")
        if not self.grace_period_s >= 0:
            raise ValueError("grace_period_s (--grace-period) must be >= 0 seconds. "
                             f"Received: grace_period_s={self.grace_period_s}")
        check_resolvable(self.master_addr)
        if self.max_nodes is not None:
            return  # the rendezvous places the hosts and serves the store, on loopback too
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(
                f"node_rank (--node-rank) must be in [0, {self.nnodes}): this host's index among the --nnodes "
                f"{self.nnodes} hosts. Number the hosts 0 to {self.nnodes - 1}, and pass --nnodes with --node-rank. "
                f"Received: node_rank={self.node_rank}, nnodes={self.nnodes}")
        if self.nnodes > 1 and is_loopback(self.master_addr):
            raise ConfigurationError(
                f"A job on {self.nnodes} hosts needs --master-addr set to an address of host 0 (node rank 0) "
                "that the other hosts reach; a loopback address only reaches each host itself, so every host "
                "would wait for peers that never come. Pass the same --master-addr HOST0 on every host. "
                f"Received: nnodes={self.nnodes}, master_addr={self.master_addr!r}")
        if self.nnodes > 1 and self.master_port is None:
            raise ValueError(
                "A multi-host job needs the same --master-port on every host. "
                f"Received: nnodes={self.nnodes}, master_port=None"
            )


def run(config: LaunchConfig) -> int:
    """Runs the job to completion; returns 0 when every worker succeeded.

    When a worker fails and restarts are left (``max_restarts``), every
    worker is stopped and the whole group starts again after a backoff
    (1 s, doubling, at most 30 s); with ``BackupAndRestore`` the job then
    continues from its last backup.

    Raises:
        WorkerFailedError: When a worker failed and no restart was left; every
            other worker has been stopped by then.
    """
    for attempt in range(config.max_restarts + 1):
        try:
            with tempfile.TemporaryDirectory(prefix="stratagem-errors-") as error_dir:
                return _run_in(config, error_dir, attempt)
        except WorkerFailedError as err:
            if attempt == config.max_restarts:
                raise
            backoff = min(30.0, 2.0**attempt)
            logger.warning("%s", err)
            say(f"worker rank {err.rank} failed (exit code {err.exit_code}); restarting all workers in {backoff:g}s "
                f"(restart {attempt + 1} of {config.max_restarts})")
            with stop_on_signals() as stop:  # Ctrl-C during the backoff ends the job like Ctrl-C during a run
                if stop.wait(backoff):
                    say("stopped during the restart backoff; no worker is running")
                    return 130
    raise AssertionError("unreachable: the loop returns or raises")


def _run_in(config: LaunchConfig, error_dir: str, attempt: int) -> int:
    resolver = tf_config_resolver(os.environ)
    world_size = config.num_processes * config.nnodes if config.num_processes else \
        resolver.world_size if resolver else 1
    code = run_group(_start_workers(config, error_dir, attempt), world_size=world_size,
                     grace_period_s=config.grace_period_s)
    assert code is not None, "no interruption was asked for"
    return code


def run_group(workers: list[Worker], *, world_size: int, grace_period_s: float,
              interrupted: Callable[[], bool] | None = None) -> int | None:
    """Watches one start of the workers to its end, then stops every worker still running.

    Returns 0 when every worker succeeded, 130 when SIGINT/SIGTERM (Ctrl-C)
    stopped the job, and None when ``interrupted()`` (polled about every
    0.5 s) became true: an elastic job's hosts changed.

    Raises:
        WorkerFailedError: For the first worker that failed (the root cause,
            or a stopped worker that hung its peers).
    """
    signaled: set[int] = set()
    hung: list[Worker] = []
    with stop_on_signals() as stop:
        try:
            outcome = _watch(workers, stop, interrupted)
            if isinstance(outcome, Worker):  # looked at before our signals: a stopped worker hangs its peers
                hung = [worker for worker in workers if _is_stopped(worker)]
        finally:
            signaled = stop_all(workers, grace_period_s)
    if isinstance(outcome, Worker):
        raise _failure(hung[0], world_size, reported_by=outcome) if hung else \
            _failure(_root_cause(outcome, workers, signaled), world_size)
    if outcome == "interrupted":
        return None
    return 130 if stop.is_set() else 0


def say(line: str) -> None:
    """Tells the user ``line`` on the launcher's stderr, as ``stratagem: line``."""
    print(f"stratagem: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM (Ctrl-C) while the block runs; the old handlers come back after it."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def relaunch_current_script(num_processes: int) -> int:
    """Re-runs this Python program as ``num_processes`` workers; returns the exit code.

    Used by ``MirroredStrategy`` when a script is started with plain
    ``python train.py``: this process becomes the supervisor.
    """
    command = (sys.executable, *sys.orig_argv[1:])
    try:
        return run(LaunchConfig(command=command, num_processes=num_processes))
    except WorkerFailedError as err:
        say(str(err))
        return err.exit_code


@dataclass
class Worker:
    rank: int
    process: subprocess.Popen[bytes]
    tail: collections.deque[str]
    readers: list[threading.Thread]
    error_file: str


@dataclass(frozen=True)
class Placement:
    """Where this host's workers sit in the job: ranks ``first_rank`` to ``first_rank + num_local - 1``.

    Args:
        first_rank: Global rank of this host's first worker.
        num_local: Workers on this host.
        world_size: Workers in the job.
        master_addr: Where rank 0 serves the workers' store.
        master_port: Its port.
    """

    first_rank: int
    num_local: int
    world_size: int
    master_addr: str
    master_port: int


def _start_workers(config: LaunchConfig, error_dir: str, attempt: int) -> list[Worker]:
    # NOTE: one host: every process is ours, so the job gets a fresh secret; a multi-host job
    # uses the one the user gave every host (job_secret).
    one_host = config.num_processes is not None and config.nnodes == 1
    base_env = dict(os.environ) | {RESTART_COUNT_ENV: str(attempt)} | job_secret.env_for_job(
        os.environ, generate_if_missing=one_host)
    if config.num_processes is None:
        rank, label = tf_config_place(base_env)
        return [spawn(config.command, base_env, rank=rank, label=label,
                      error_file=os.path.join(error_dir, f"rank{rank}.json"))]
    port = config.master_port or find_free_port(config.master_addr)
    placement = Placement(first_rank=config.node_rank * config.num_processes, num_local=config.num_processes,
                          world_size=config.num_processes * config.nnodes, master_addr=config.master_addr,
                          master_port=port)
    return start_workers(config.command, base_env, placement, timeout_s=config.timeout_s, error_dir=error_dir,
                         local_job=config.nnodes == 1)


def start_workers(command: tuple[str, ...], base_env: dict[str, str], placement: Placement, *,
                  timeout_s: float | None, error_dir: str, local_job: bool) -> list[Worker]:
    """Starts this host's ``placement.num_local`` workers, each with its ``RANK`` and the job's layout."""
    # NOTE: each local replica of a one-host job gets a TF_CONFIG naming the same job as its
    # RANK/WORLD_SIZE/MASTER_* (TF scripts read it); a multi-host job's other addresses are unknown here.
    tf_configs = local_tf_configs(placement.world_size, host=placement.master_addr,
                                  master_port=placement.master_port) if local_job else None
    base_env = dict(base_env)
    if "TF_CONFIG" in base_env:
        what = "replaced by one per replica naming the same job" if tf_configs else "dropped"
        warnings.warn(f"TF_CONFIG is {what} for the -n local replicas: they use RANK/WORLD_SIZE/MASTER_*.", stacklevel=3)
        base_env.pop("TF_CONFIG")
    if "OMP_NUM_THREADS" not in base_env:
        # Each local replica gets its share of the host's cores; oversubscribing them
        # makes every replica, and so every step, slower. torch reads this at start.
        base_env["OMP_NUM_THREADS"] = str(threads_per_process(placement.num_local))
    workers = []
    for local_rank in range(placement.num_local):
        rank = placement.first_rank + local_rank
        env = base_env | worker_env(
            rank=rank, world_size=placement.world_size, local_rank=local_rank, local_world_size=placement.num_local,
            master_addr=placement.master_addr, master_port=placement.master_port, timeout_s=timeout_s,
        ) | ({"TF_CONFIG": tf_configs[rank]} if tf_configs else {})
        error_file = os.path.join(error_dir, f"rank{rank}.json")
        workers.append(spawn(command, env, rank=rank, label=f"rank {rank}", error_file=error_file))
    return workers


def tf_config_place(env: Mapping[str, str]) -> tuple[int, str]:
    """(rank, output label) of the one process a TF_CONFIG host runs: ``[rank r]`` of the whole job.

    Outside the all-reduce group (ps, evaluator) the label is the task, e.g. ``ps 0``.
    """
    resolver = tf_config_resolver(env)
    if resolver is None:
        return 0, "worker"
    if resolver.rank is None:
        return 0, f"{resolver.task_type} {resolver.task_id}"
    return resolver.rank, f"rank {resolver.rank}"


def tf_config_resolver(env: Mapping[str, str]) -> TFConfigClusterResolver | None:
    if not env.get("TF_CONFIG"):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the script's own resolver warns about the same TF_CONFIG
            return TFConfigClusterResolver(env)
    except ValueError:  # malformed: the script's strategy reports it in full
        return None


def spawn(command: tuple[str, ...], env: dict[str, str], *, rank: int, label: str, error_file: str) -> Worker:
    """Starts one process that dies with us; its output lines are passed on with a ``[label]`` prefix."""
    # NOTE: preexec_fn runs in the child between fork and exec: workers die with the
    # supervisor, even when it is killed by SIGKILL.
    process = subprocess.Popen(
        list(command), env=env | {ERROR_FILE_ENV: error_file}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=die_with_parent,
    )
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    readers = [
        threading.Thread(target=_pump, args=(process.stdout, sys.stdout, f"[{label}] ", None, rank), daemon=True),
        threading.Thread(target=_pump, args=(process.stderr, sys.stderr, f"[{label}] ", tail, rank), daemon=True),
    ]
    for reader in readers:
        reader.start()
    return Worker(rank, process, tail, readers, error_file)


def _pump(source: IO[bytes], sink: IO[str], prefix: str, tail: collections.deque[str] | None, rank: int) -> None:
    # torch's distributed excepthook prefixes traceback lines with "[rankN]: ";
    # ours already names the rank, so drop the duplicate.
    torch_prefix = f"[rank{rank}]: "
    for raw in iter(source.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n").removeprefix(torch_prefix)
        if tail is not None:
            tail.append(line)
        try:
            sink.write(prefix + line + "\n")
            sink.flush()
        except (OSError, ValueError):  # our own output closed: keep draining the pipe
            pass
    source.close()


def _watch(workers: list[Worker], stop: threading.Event,
           interrupted: Callable[[], bool] | None) -> Worker | Literal["interrupted"] | None:
    """Waits until every worker exits 0 (None), one fails (returns it), ``interrupted()``, or stop is set (None)."""
    next_poll = time.monotonic() + 0.5
    while not stop.is_set():
        running = False
        for worker in workers:
            code = worker.process.poll()
            if code is None:
                running = True
            elif code != 0:
                return worker
        if not running:
            return None
        if interrupted is not None and time.monotonic() >= next_poll:
            if interrupted():
                return "interrupted"
            next_poll = time.monotonic() + 0.5
        stop.wait(0.05)
    return None


def stop_all(workers: list[Worker], grace_period_s: float) -> set[int]:
    """Stops the workers still running; returns the ranks it had to signal."""
    signaled = stop_processes([worker.process for worker in workers], grace_period_s)
    for worker in workers:
        for reader in worker.readers:
            reader.join(timeout=5)
    return {worker.rank for worker in workers if worker.process in signaled}


def stop_processes(processes: list[subprocess.Popen], grace_period_s: float) -> list[subprocess.Popen]:
    """SIGTERM to the processes still running, SIGKILL after ``grace_period_s``; returns those it signalled."""
    signaled = [process for process in processes if process.poll() is None]
    for process in signaled:
        process.terminate()
    deadline = time.monotonic() + grace_period_s
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return signaled


def _root_cause(first_seen: Worker, workers: list[Worker], signaled: set[int]) -> Worker:
    """The worker that failed first; its peers then fail in their next collective.

    A worker killed by a signal we did not send (preempted, OOM-killed) comes
    first: it left no error file and its peers' exceptions follow its death.
    Otherwise the earliest recorded uncaught exception, else the first exit seen.
    """
    for worker in workers:
        code = worker.process.returncode
        if code is not None and code < 0 and worker.rank not in signaled:
            return worker
    records = [(record.written_ns, w) for w in workers if (record := read_error_file(w.error_file)) is not None]
    return min(records, key=lambda item: item[0])[1] if records else first_seen


def _is_stopped(worker: Worker) -> bool:
    """Whether the worker is stopped (SIGSTOP, a debugger): alive but answering no peer (Linux)."""
    try:
        with open(f"/proc/{worker.process.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _failure(worker: Worker, world_size: int, *, reported_by: Worker | None = None) -> WorkerFailedError:
    reason, exit_code = describe_exit(worker)
    if reported_by is not None:  # the worker hung: its peer failed waiting for it
        reason = (f"was stopped (SIGSTOP, a debugger or a frozen host) and hung the job: rank {reported_by.rank} "
                  f"{describe_exit(reported_by)[0]}")
        exit_code = 1
    tail = "\n".join(worker.tail)
    message = (
        f"Worker rank {worker.rank} (of {world_size}) {reason}; the other workers were stopped. "
        f"Last {len(worker.tail)} lines of its stderr:\n{tail}"
    )
    return WorkerFailedError(message, rank=worker.rank, exit_code=exit_code, log_tail=tail)


def describe_exit(worker: Worker) -> tuple[str, int]:
    """How an exited worker ended, and the exit status the launcher returns for it.

    E.g. ``("was killed by SIGKILL", 137)``: 128 + N for signal N, as a shell does.
    """
    code = worker.process.returncode
    record = read_error_file(worker.error_file)
    if record is not None:
        # It raised; a negative code only means we stopped it during its teardown.
        return f"raised {record.message}", code if code > 0 else 1
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}", 128 - code
    return f"exited with code {code}", code
