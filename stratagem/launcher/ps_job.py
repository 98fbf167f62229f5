"""A parameter-server job on this host: ``stratagem run --ps P --workers W train.py``.

One ``chief`` and ``W`` workers run the script, and ``P`` servers run
``python -m stratagem.distribute.ps.serve``; each task gets its own
``TF_CONFIG``. The job's exit status is the chief's. A worker that dies while
the chief runs is restarted alone (it rejoins and the chief hands it steps
again); a server that dies ends the job, because the variables and optimizer
state it held are gone. Starting, prefixing and stopping processes is
``supervisor``'s; what lives here is the policy of a PS job, plus the switch
that makes a multi-host ``ps`` task run a server instead of the script.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from stratagem.distribute import job_secret
from stratagem.distribute.cluster import CHIEF, PS, WORKER
from stratagem.errors import WorkerFailedError
from stratagem.launcher.environment import ps_cluster_configs, ps_task_env, threads_per_process
from stratagem.launcher.supervisor import (LaunchConfig, Worker, describe_exit, say, spawn, stop_all,
                                           stop_on_signals, tf_config_resolver)

SERVER_COMMAND = (sys.executable, "-m", "stratagem.distribute.ps.serve")
# Workers replay the chief's program and end by themselves soon after it; they
# get at least this long before they are stopped.
WORKER_EXIT_WAIT_S = 30.0


@dataclass
class _Task:
    kind: str
    index: int
    tf_config: str
    worker: Worker | None = None  # its current (or last) process
    restarts: int = 0
    restart_at: float | None = None  # time.monotonic() of a pending restart
    down: bool = False  # a worker that died with no restarts left

    @property
    def name(self) -> str:
        return CHIEF if self.kind == CHIEF else f"{self.kind} {self.index}"

    def exit_code(self) -> int | None:
        return None if self.worker is None else self.worker.process.poll()


def run(config: LaunchConfig) -> int:
    """Runs the job until the chief ends; returns 0 when the chief succeeded (130 after Ctrl-C).

    After the chief exits 0, the workers get ``max(grace_period_s, 30)``
    seconds to end by themselves; then they and the servers are stopped
    (SIGTERM, then SIGKILL after ``grace_period_s``).

    Raises:
        WorkerFailedError: When the chief failed, or a server exited while the
            chief ran; every other task has been stopped by then.
    """
    assert config.num_workers is not None and config.num_ps is not None, "LaunchConfig of a PS job"
    configs = ps_cluster_configs(config.num_workers, config.num_ps, host=config.master_addr)
    # Every task of the job, restarted workers too, proves the same secret to the servers and the chief.
    job_env = job_secret.env_for_job(os.environ, generate_if_missing=True)
    tasks = [_Task(kind, index, tf_config) for (kind, index), tf_config in configs.items()]  # chief, workers, servers
    with tempfile.TemporaryDirectory(prefix="stratagem-errors-") as error_dir, stop_on_signals() as stop:
        try:
            # Servers first: the chief creates its variables on them as soon as it starts.
            for task in sorted(tasks, key=lambda t: t.kind != PS):
                _start(task, config, error_dir, job_env)
            failed = _watch(tasks, config, error_dir, stop, job_env)
            if failed is None and not stop.is_set():
                _wait_for_workers(tasks, stop, max(config.grace_period_s, WORKER_EXIT_WAIT_S))
        finally:
            stop_all([t.worker for t in tasks if t.worker is not None], config.grace_period_s)
        if stop.is_set():
            return 130
        if failed is not None:
            raise _failure(failed)  # while its error file still exists
    return 0


def command_for_this_task(command: tuple[str, ...], environ: Mapping[str, str]) -> tuple[str, ...]:
    """``command``, or the server command when ``TF_CONFIG`` names this process a ``ps`` task.

    With one ``stratagem run train.py`` per host (TensorFlow style), a ``ps``
    host needs no script: it only serves variables.
    """
    resolver = tf_config_resolver(environ)  # None if malformed: the script's strategy reports it, with the details
    if resolver is None or resolver.task_type != PS:
        return command
    say(f"TF_CONFIG names this process ps {resolver.task_id}, so it runs a parameter server instead of "
        f"`{shlex.join(command[1:])}` (a ps task needs no script)")
    return SERVER_COMMAND


def _start(task: _Task, config: LaunchConfig, error_dir: str, job_env: dict[str, str]) -> None:
    env = dict(os.environ) | job_env | ps_task_env(tf_config=task.tf_config, restart_count=task.restarts,
                                         timeout_s=config.timeout_s)
    # Every task of the job runs on this host: each gets its share of the cores, as `-n` replicas do (torch's
    # default, a thread per core in each of the 2 + W + P tasks, oversubscribes them).
    env.setdefault("OMP_NUM_THREADS", str(threads_per_process(1 + (config.num_workers or 0) + (config.num_ps or 0))))
    command = SERVER_COMMAND if task.kind == PS else config.command
    # One error file per start: a restarted worker must not inherit its last crash.
    error_file = os.path.join(error_dir, f"{task.kind}{task.index}.{task.restarts}.json")
    ordinal = {CHIEF: 0, WORKER: 1, PS: 1 + (config.num_workers or 0)}[task.kind] + task.index
    task.worker = spawn(command, env, rank=ordinal, label=task.name, error_file=error_file)


def _watch(tasks: list[_Task], config: LaunchConfig, error_dir: str, stop: threading.Event,
           job_env: dict[str, str]) -> _Task | None:
    """Waits until the chief exits 0 (returns None), the chief or a server fails (returns it), or stop is set."""
    chief = tasks[0]
    while not stop.is_set():
        if chief.exit_code() == 0:
            return None
        for task in tasks:
            # Servers before the chief: a chief that fails right after a server died failed of it.
            if task.kind == PS and task.exit_code() is not None:
                return task
        if chief.exit_code() is not None:
            return chief
        for task in tasks:
            if task.kind == WORKER:
                _look_after_worker(task, config, error_dir, job_env)
        stop.wait(0.05)
    return None


def _look_after_worker(task: _Task, config: LaunchConfig, error_dir: str, job_env: dict[str, str]) -> None:
    """Restarts a dead worker alone when its backoff is over; the chief requeues the steps it held."""
    if task.restart_at is not None:
        if time.monotonic() >= task.restart_at:
            task.restart_at = None
            _start(task, config, error_dir, job_env)
        return
    code = task.exit_code()
    if task.down or code is None or code == 0:
        return
    assert task.worker is not None, "a task with an exit code has a process"
    reason, _ = describe_exit(task.worker)
    if task.restarts < config.max_restarts:
        backoff = min(30.0, 2.0**task.restarts)
        task.restarts += 1
        task.restart_at = time.monotonic() + backoff
        say(f"{task.name} {reason}; restarting it alone in {backoff:g}s "
             f"(restart {task.restarts} of {config.max_restarts})")
    else:
        task.down = True
        say(f"{task.name} {reason} and has no restarts left (--max-restarts {config.max_restarts}); "
             "the job goes on without it")


def _wait_for_workers(tasks: list[_Task], stop: threading.Event, timeout_s: float) -> None:
    """After the chief succeeded: lets the workers finish their replay, for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    workers = [t for t in tasks if t.kind == WORKER and t.restart_at is None]
    while any(t.exit_code() is None for t in workers) and time.monotonic() < deadline and not stop.is_set():
        stop.wait(0.05)
    late = [t.name for t in workers if t.exit_code() is None]
    if late and not stop.is_set():
        say(f"{', '.join(late)} still running {timeout_s:g}s after the chief ended; stopping")


def _failure(task: _Task) -> WorkerFailedError:
    assert task.worker is not None, "only a started task can fail"
    reason, exit_code = describe_exit(task.worker)
    if task.kind == PS:
        # A server that exits 0 was stopped by someone else; the job cannot go on either way.
        exit_code = exit_code or 1
        what = (f"{task.name} {reason} while the chief was running: parameter-server state is lost; the job "
                "was stopped. Restart the job and resume from the last checkpoint (BackupAndRestore).")
    else:
        what = f"The chief {reason}; the workers and parameter servers were stopped."
    tail = "\n".join(task.worker.tail)
    if tail:
        what += f" Last {len(task.worker.tail)} lines of its stderr:\n{tail}"
    return WorkerFailedError(what, rank=task.index, exit_code=exit_code, log_tail=tail)
