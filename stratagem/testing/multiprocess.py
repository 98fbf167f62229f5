"""``run_workers``: run a function in N real worker processes on 127.0.0.1, with a deadline.

Each worker gets the launcher's environment contract (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ...), so strategies built inside it join a
real gloo process group. Results come back through a local multiprocessing
queue. At the deadline each unfinished rank dumps its Python stacks
(``faulthandler``, on ``SIGUSR1``), every worker is killed, and the error
lists what each rank was doing with those stacks; an exception in any worker
is re-raised with every rank's traceback.

The workers are forks of a warm server (``warm_processes``) that imported
torch and stratagem once, so a run starts in about 0.1 s instead of an
interpreter's 1.5-2 s. Each worker still starts from the parent's current
environment, as a spawned one would.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import pickle
import queue
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from stratagem.launcher.environment import worker_env
from stratagem.launcher.ports import find_free_port
from stratagem.testing.warm_processes import warm_context


def run_workers(fn: Callable[..., Any], world_size: int = 2, *, args: tuple = (), timeout_s: float = 60.0,
                env: dict[str, str] | None = None) -> list[Any]:
    """Runs ``fn(rank, world_size, *args)`` in ``world_size`` processes; returns results by rank.

    Args:
        fn: A module-level function (it is pickled by reference).
        world_size: Number of worker processes.
        args: Extra arguments, pickled to each worker.
        timeout_s: Deadline for the whole run.
        env: Extra environment variables for the workers.

    Raises:
        RuntimeError: If a worker raised or died; includes every rank's traceback.
        TimeoutError: If the deadline passed; the workers are killed first.
    """
    ctx = warm_context()
    results: mp.Queue = ctx.Queue()
    port = find_free_port("127.0.0.1")
    stack_dir = tempfile.TemporaryDirectory(prefix="stratagem-stacks-")
    stack_paths = [os.path.join(stack_dir.name, f"rank{rank}.txt") for rank in range(world_size)]
    # NOTE: not daemonic: a worker may start processes of its own (a parallel map's workers), which
    # multiprocessing forbids a daemon; the finally below kills every worker whatever happens.
    environs = [_worker_environ(rank, world_size, port, env or {}, timeout_s) for rank in range(world_size)]
    processes = [ctx.Process(target=_worker_main,
                             args=(fn, rank, world_size, args, environs[rank], results, stack_paths[rank]))
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    try:
        return _collect(processes, results, world_size, timeout_s, stack_paths)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=5)
        stack_dir.cleanup()


def _collect(processes: list[Any], results: mp.Queue, world_size: int, timeout_s: float,
             stack_paths: list[str]) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    outcomes: dict[int, tuple[str, Any]] = {}
    while len(outcomes) < world_size:
        try:
            rank, status, payload = results.get(timeout=0.2)
            outcomes[rank] = (status, payload)
            continue
        except queue.Empty:
            pass
        for rank, process in enumerate(processes):
            if rank not in outcomes and process.exitcode is not None and results.empty():
                outcomes[rank] = ("error", f"process exited with code {process.exitcode} without a result")
        if time.monotonic() > deadline:
            pending = [r for r in range(world_size) if r not in outcomes]
            raise TimeoutError(f"run_workers: rank(s) {pending} did not finish within {timeout_s:g}s. "
                               f"Finished: {_describe(outcomes)}{_stacks(processes, pending, stack_paths)}")
        if any(status == "error" for status, _ in outcomes.values()):
            _grace(processes, outcomes, results, world_size)
            break
    errors = {rank: payload for rank, (status, payload) in outcomes.items() if status == "error"}
    if errors:
        raise RuntimeError("run_workers: worker(s) failed.\n" + "\n".join(
            f"--- rank {rank} ---\n{text}" for rank, text in sorted(errors.items())))
    return [pickle.loads(outcomes[rank][1]) for rank in range(world_size)]


def _grace(processes: list[Any], outcomes: dict[int, tuple[str, Any]], results: mp.Queue, world_size: int) -> None:
    """After a failure, give the other ranks a moment to report their own error."""
    end = time.monotonic() + 3.0
    while len(outcomes) < world_size and time.monotonic() < end:
        try:
            rank, status, payload = results.get(timeout=0.2)
            outcomes[rank] = (status, payload)
        except queue.Empty:
            continue


def _describe(outcomes: dict[int, tuple[str, Any]]) -> str:
    return ", ".join(f"rank {r}: {s}" for r, (s, _) in sorted(outcomes.items())) or "none"


def _stacks(processes: list[Any], ranks: list[int], stack_paths: list[str], wait_s: float = 3.0) -> str:
    """Where each of ``ranks`` is stuck: its threads' Python stacks, which ``SIGUSR1`` makes it write."""
    asked = [rank for rank in ranks if processes[rank].is_alive()]
    for rank in asked:
        os.kill(processes[rank].pid, signal.SIGUSR1)
    texts = dict.fromkeys(ranks, "")
    end = time.monotonic() + wait_s
    while asked and time.monotonic() < end:
        time.sleep(0.2)
        now = {rank: _read_text(stack_paths[rank]) for rank in asked}
        # The handler writes at once, from the signal: a file that stopped growing is whole.
        done = all(now[rank] and now[rank] == texts[rank] for rank in asked)
        texts |= now
        if done:
            break
    return "".join(f"\n--- rank {rank}: its threads' Python stacks at the deadline ---\n"
                   + (texts[rank] or "(none: it did not answer SIGUSR1)\n") for rank in ranks)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except FileNotFoundError:  # the rank did not get as far as registering
        return ""


def _worker_environ(rank: int, world_size: int, port: int, env: dict[str, str], timeout_s: float) -> dict[str, str]:
    """The parent's environment now (a fork would keep the forkserver's), the worker contract, then ``env``."""
    environ = dict(os.environ) | worker_env(rank=rank, world_size=world_size, local_rank=rank,
                                            local_world_size=world_size, master_addr="127.0.0.1", master_port=port,
                                            timeout_s=None)
    environ.setdefault("STRATAGEM_TIMEOUT_S", f"{max(5.0, timeout_s / 2):g}")
    return environ | env


def _worker_main(fn: Callable[..., Any], rank: int, world_size: int, args: tuple, environ: dict[str, str],
                 results: mp.Queue, stack_path: str) -> None:
    # At the deadline the parent asks for this rank's stacks (a timeout that names the line beats a bare one).
    stacks = open(stack_path, "w")  # open as long as the process: the handler writes to its descriptor
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    # Every variable is set before torch.distributed reads them (when the group is created).
    os.environ.clear()
    os.environ.update(environ)
    import torch

    torch.set_num_threads(1)
    try:
        # By value: a tensor put on the queue as it is would be shared through a file descriptor, lost once this
        # worker exits before the parent reads it.
        results.put((rank, "ok", pickle.dumps(fn(rank, world_size, *args))))
    except BaseException:  # report everything, including SystemExit, to the parent
        results.put((rank, "error", traceback.format_exc()))
    finally:
        from stratagem.distribute import collectives

        collectives.destroy_process_group()
