"""Warm worker processes for tests: forks of a server that has already imported torch and stratagem.

A fresh interpreter pays 1.5-2 s of CPU to import torch and stratagem, and
about as much again for ``torch._dynamo`` on its first optimizer step; a
suite that starts a few hundred workers spends most of its time there.
``multiprocessing``'s forkserver imports them once, and each worker is a
fork of that server (about 0.1 s). ``run_workers`` takes its processes from
``warm_context()``; ``ScriptProcess`` runs a script (``python script.py
ARGS`` or ``python -m module``) in one, for the parameter-server test
cluster and the seed examples; ``launched_processes`` starts the workers
``stratagem run -n N script`` would, with the launcher's environment.
Tests of process start-up itself (the launcher, restarts, signals) do not
belong here: they exec real interpreters.

A forked worker starts from the server's state, not a fresh interpreter's,
so: its environment is set before it touches torch.distributed (which
reads it when a group is created), torch's thread pools start at the
first parallel op after the fork (the server runs none), and a script's
exit runs what an interpreter's exit runs (non-daemon threads joined,
``threading`` exit hooks, ``atexit``), see ``_run_script``. What a fresh
interpreter sets up at start that a fork inherits instead is set again
there: ``sys.orig_argv``, torch's thread count (``OMP_NUM_THREADS``, else one),
and the exception hook ``import stratagem`` installs for a launched worker. numpy's global random state is the server's,
the same in every fork (Python's ``random`` reseeds itself): the PS tests'
tolerances were set on that, and a test that needs other draws per process
seeds them; one that needs the whole run to repeat sets ``TEST_SEED_ENV``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from multiprocessing.context import ForkServerContext
from pathlib import Path

from stratagem import _launched
from stratagem._python_internals import run_interpreter_exit
from stratagem.distribute import job_secret
from stratagem.launcher.environment import local_tf_configs, threads_per_process, worker_env
from stratagem.launcher.ports import find_free_port

# What every worker would import first, in this order, after _cuda_via_nvml's setting. torch._dynamo is imported by
# torch.optim on the first step; Keras (on the torch backend: `import stratagem` sets KERAS_BACKEND first) and
# stratagem.tf by the seed examples;
# stratagem's public names (imported on first use) by _warm_preload, last, which then freezes the collector's view.
PRELOAD = ("stratagem.testing._cuda_via_nvml", "torch", "torch._dynamo", "numpy", "stratagem",
           "stratagem.distribute.ps.server", "grpc", "keras",
           "stratagem.tf", "stratagem.tf.keras", "stratagem.testing._warm_preload")


# A test that needs a script's run to repeat (its weights, shuffles, Keras's initializers) sets this in the
# script's environment: the fork seeds Python, numpy, torch and Keras with it before the script's first line.
TEST_SEED_ENV = "STRATAGEM_TEST_SEED"


def warm_context() -> ForkServerContext:
    """The forkserver context whose server has imported ``PRELOAD`` (started on first use, once per process)."""
    context = mp.get_context("forkserver")
    # NOTE: the server reads this list when it starts (the first Process.start()); later calls change nothing.
    context.set_forkserver_preload(list(PRELOAD))
    return context  # type: ignore[return-value]


def start_warm_server() -> None:
    """Starts the warm server now, in the background, rather than at the first warm process.

    Its imports (~4 s of CPU) then overlap whatever this process does next (a
    test session's collection) instead of the first test that needs it.
    """
    warm_context()
    from multiprocessing import forkserver

    forkserver.ensure_running()


class ScriptProcess:
    """``python COMMAND...`` in a warm process, with the part of ``subprocess.Popen`` tests use.

    Args:
        command: What follows ``python`` on a command line: ``(script, *args)`` or ``("-m", module, *args)``.
        env: The process's whole environment (as ``Popen(env=...)``).
        cwd: Its working directory.
        log_path: File that receives its stdout and stderr (truncated first).
    """

    def __init__(self, command: Sequence[str], *, env: dict[str, str], cwd: str | Path, log_path: str | Path) -> None:
        if not command or (command[0] == "-m" and len(command) < 2):
            raise ValueError(f"command must name a script or '-m MODULE'. Received: command={list(command)}")
        self.args = [sys.executable, *command]
        # NOTE: not daemonic: a task may start processes of its own; the cluster stops every task itself.
        self._process = warm_context().Process(
            target=_run_script, args=(tuple(command), dict(env), str(cwd), str(log_path)), daemon=False)
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)  # type: ignore[arg-type]
            except ProcessLookupError:  # ended since the poll
                pass

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def launched_processes(command: Sequence[str], num_processes: int, *, env: dict[str, str], cwd: str | Path,
                       log_dir: str | Path) -> list[ScriptProcess]:
    """The workers ``stratagem run -n NUM_PROCESSES COMMAND...`` starts on one host, as warm processes.

    Each gets the environment the launcher gives it (``supervisor`` and
    ``launcher.environment``: ``RANK``, ``WORLD_SIZE``, ``MASTER_*``, a
    ``TF_CONFIG`` per replica, the job secret, ``OMP_NUM_THREADS``, its error
    file), over ``env`` less any ``TF_CONFIG``; rank r's output goes to
    ``log_dir/rank{r}.log``. The launcher's own path (exec, output prefixes,
    stopping the peers of a failed worker) is left to the caller and to the
    launcher's tests.
    """
    port = find_free_port("127.0.0.1")
    base = {k: v for k, v in env.items() if k != "TF_CONFIG"} | {_launched.RESTART_COUNT_ENV: "0"}
    base |= job_secret.env_for_job(env, generate_if_missing=True)
    base.setdefault("OMP_NUM_THREADS", str(threads_per_process(num_processes)))
    tf_configs = local_tf_configs(num_processes, host="127.0.0.1", master_port=port)
    error_dir = tempfile.mkdtemp(prefix="stratagem-errors-", dir=log_dir)
    return [ScriptProcess(command, cwd=cwd, log_path=Path(log_dir) / f"rank{rank}.log",
                          env=base | worker_env(rank=rank, world_size=num_processes, local_rank=rank,
                                                local_world_size=num_processes, master_addr="127.0.0.1",
                                                master_port=port, timeout_s=None)
                          | {"TF_CONFIG": tf_configs[rank],
                             _launched.ERROR_FILE_ENV: os.path.join(error_dir, f"rank{rank}.json")})
            for rank in range(num_processes)]


def _run_script(command: tuple[str, ...], env: dict[str, str], cwd: str, log_path: str) -> None:
    """In the forked worker: what ``python COMMAND`` does, from argv and sys.path to the exit."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    for stream in (sys.stdout, sys.stderr):  # unbuffered, as PYTHONUNBUFFERED=1: a SIGKILLed task's log is whole
        stream.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    _as_fresh_interpreter(command)
    # sys.path as a fresh interpreter builds it: the script's folder first, then PYTHONPATH.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        sys.path[:0] = [cwd, *extra]
    else:
        sys.argv = list(command)
        sys.path[:0] = [os.path.dirname(os.path.abspath(command[0])), *extra]
    try:
        if command[0] == "-m":
            runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(command[0], run_name="__main__")
    except SystemExit:
        raise
    except BaseException as err:
        # As the interpreter does for an uncaught exception: sys.last_* first (stratagem reads
        # them at exit to tell a crash), then sys.excepthook prints it; exit status 1.
        sys.last_type, sys.last_value, sys.last_traceback = type(err), err, err.__traceback__
        sys.excepthook(type(err), err, err.__traceback__)
        raise SystemExit(1) from None
    finally:
        run_interpreter_exit()  # a forked process ended by os._exit skips it


def _as_fresh_interpreter(command: tuple[str, ...]) -> None:
    """What a new interpreter would have set up differently from the server it was forked from."""
    # A script that starts its own replicas re-runs `sys.executable *sys.orig_argv[1:]`.
    sys.orig_argv = [sys.executable, *command]
    # torch sized its thread pool in the server; a fresh interpreter reads OMP_NUM_THREADS (`stratagem run -n 2`
    # gives each worker half the cores). NOTE: without it, one thread, as run_workers' workers: a test's processes
    # share the cores with each other and the other xdist worker, where torch's spinning threads only burn CPU
    # (two 2-thread examples on 2 cores took 3.5x the CPU time of 1-thread ones, and longer).
    threads = os.environ.get("OMP_NUM_THREADS", "")
    import torch

    torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else 1)
    if os.environ.get(_launched.ERROR_FILE_ENV):
        _launched.install_excepthook()  # as `import stratagem` does in a launched worker (preloaded here already)
    seed = os.environ.get(TEST_SEED_ENV, "")
    if seed:  # a test's seeded run: as `keras.utils.set_random_seed(seed)` on the script's first line
        import keras

        keras.utils.set_random_seed(int(seed))
