"""Parallel ``map``: calls run in forked worker processes, results in input order.

Why processes: a Python ``map_func`` holds the GIL, so threads would run it
one call at a time. Workers are forked (as torch's DataLoader does on Linux),
so they inherit the pipeline and ``map_func`` needs no pickling, lambdas
included; only indices and results travel, through local pipes. Over a
random-access parent a worker receives indices and computes the upstream
elements too, so the whole chain runs in parallel. Two users share this:

- ``MapDataset._get_many`` (a ``batch`` above the map asks for B elements):
  the indices are split into chunks, one round trip per chunk.
- ``ParallelMapIterator`` (iterating the map itself): a window of calls in
  flight ahead of the consumer.

AUTOTUNE (``num_parallel_calls=AUTOTUNE``):

1. Calibrate: the first calls run inline, timing ``map_func``. A call under
   ``MIN_CALL_S`` is cheaper than moving its result between processes, so the
   map stays inline (parallelism 1).
2. Otherwise start one worker per available core.
3. Calls travel in chunks of about ``CHUNK_S`` of work (a round trip through
   a pipe costs about a millisecond, as much as a short call). The
   iterator's window of chunks in flight starts at two per worker and grows
   by one whenever the consumer finds its next result not ready, up to four
   per worker and to what fits ``Options().autotune.ram_budget`` given the
   measured size of one result. A consumer that never waits leaves it.

An exception in ``map_func`` reaches the consumer as itself (same type as
without parallelism), with a note naming the elements and carrying the
worker's traceback, and the workers are stopped. A worker that dies
is reported with its exit code; waits poll worker liveness, so none hangs.
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing as mp
import os
import pickle
import queue
import signal
import socket
import stat
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from stratagem._nest import map_structure
from stratagem.data._structure import call_with_element, nbytes
from stratagem.data.iterator import DatasetIterator, IterContext, Pending
from stratagem.data.options import AUTOTUNE, INFINITE_CARDINALITY

MIN_CALL_S = 2e-4
CHUNK_S = 5e-3  # work per task: round trips through a pipe cost about 1 ms
CALIBRATION_CALLS = 4
_POLL_S = 0.1
_MAX_WINDOW_PER_WORKER = 4
_ORPHAN_POLL_S = 0.1


class MapFunctionError(RuntimeError):
    """Stands in for a ``map_func`` exception that could not be sent back from its worker process."""


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_count(num_parallel_calls: int) -> int:
    return available_cores() if num_parallel_calls == AUTOTUNE else int(num_parallel_calls)


class Calibration:
    """Decides, from the first calls' timings, whether processes can pay off."""

    def __init__(self, num_parallel_calls: int) -> None:
        self.autotune = num_parallel_calls == AUTOTUNE
        self.timings: list[float] = []
        self.result_bytes = 0
        fixed_inline = not self.autotune and int(num_parallel_calls) <= 1
        # True: stay inline; False: use workers; None: still measuring.
        self.inline: bool | None = True if fixed_inline else (None if self.autotune else False)

    def record(self, seconds: float, result: Any) -> None:
        self.timings.append(seconds)
        if len(self.timings) >= CALIBRATION_CALLS and self.inline is None:
            self.inline = min(self.timings) < MIN_CALL_S or available_cores() == 1
            self.result_bytes = nbytes(result)


def timed_call(fn: Any, element: Any, index: int, calibration: Calibration) -> Any:
    start = time.perf_counter()
    try:
        out = call_with_element(fn, element)
    except Exception as err:
        err.add_note(f"(in map function, on element {index})")
        raise
    if len(calibration.timings) < CALIBRATION_CALLS:  # once measuring is over, calls are not recorded
        calibration.record(time.perf_counter() - start, out)
    return out


class WorkerPool:
    """Forked workers applying a ``MapDataset``'s function; ``get(key)`` returns results by key."""

    def __init__(self, dataset: Any, num_workers: int) -> None:
        context = mp.get_context("fork")
        self._tasks: Any = context.Queue()
        self._results: Any = context.Queue()
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self._done: dict[int, tuple[str, Any]] = {}
        self._forgotten: set[int] = set()
        self._owner_pid = os.getpid()
        args = (dataset, self._tasks, self._results, self._owner_pid)
        self.processes = [context.Process(target=_worker_main, args=args, daemon=True) for _ in range(num_workers)]
        for process in self.processes:
            process.start()

    def submit(self, kind: str, payload: Any, ctx: IterContext) -> int:
        key = next(self._keys)
        self._tasks.put((key, kind, payload, (ctx.seed, ctx.epoch)))
        return key

    def forget(self, keys: Sequence[int]) -> None:
        """Drops results nobody will collect (an iterator moved or closed)."""
        with self._lock:
            for key in keys:
                if self._done.pop(key, None) is None:
                    self._forgotten.add(key)

    def ready(self, key: int) -> bool:
        self._drain(block=False)
        return key in self._done

    def get(self, key: int, where: str) -> Any:
        while key not in self._done:
            if not self.processes:
                raise RuntimeError(f"the map's worker pool was stopped (after an error) before {where} was computed")
            if not self._drain(block=True):
                self._check_alive(where)
        status, payload = self._done.pop(key)
        if status == "error":
            self.close()
            original, cause, text = payload
            if cause is not None and original.__cause__ is None:
                original.__cause__ = cause  # pickling drops the chain; the worker sent it separately
            # The original exception type, as the sequential path raises, so
            # `except ValueError` works whatever num_parallel_calls is.
            original.add_note(f"(in map function, on {where}; raised in a worker process:\n{text})")
            raise original
        return _decode(payload)

    def _drain(self, *, block: bool) -> bool:
        with self._lock:
            try:
                key, status, payload = self._results.get(timeout=_POLL_S) if block else self._results.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return False
            if key in self._forgotten:
                self._forgotten.discard(key)
            else:
                self._done[key] = (status, payload)
            return True

    def _check_alive(self, where: str) -> None:
        for number, process in enumerate(self.processes):
            if process.exitcode is not None:
                code = process.exitcode
                self.close()
                raise RuntimeError(
                    f"map worker process {number} died (exit code {code}) while computing {where}; the other "
                    "workers were stopped. A negative code is the signal that killed it (-9: often out of memory)."
                )

    def close(self) -> None:
        if os.getpid() != self._owner_pid:  # a forked copy (a warm worker, a fork in map_func): the workers are not its own
            self.processes = []
            return
        processes, self.processes = self.processes, []
        for _ in processes:
            try:
                self._tasks.put(None)
            except (OSError, ValueError):
                break
        deadline = time.monotonic() + 2.0
        for process in processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(timeout=2.0)
        if processes:
            self._tasks.close()
            self._results.close()


def submit_many(pool: WorkerPool, indices: Sequence[int], ctx: IterContext) -> Pending:
    """Starts ``map_func`` over ``parent[indices]`` on the pool, two chunks per worker; results in order."""
    count = max(1, len(pool.processes) * 2)
    step = -(-len(indices) // count)
    keys = [pool.submit("indices", list(indices[i : i + step]), ctx) for i in range(0, len(indices), step)]
    where = f"a batch of elements {indices[0]}..{indices[-1]}"

    def result() -> list[Any]:
        out: list[Any] = []
        for key in keys:
            out.extend(pool.get(key, where=where))
        return out

    return Pending(result, lambda: pool.forget(keys))


class ParallelMapIterator(DatasetIterator):
    """Iterator of a ``MapDataset`` with ``num_parallel_calls``: chunks of calls in flight ahead of the consumer.

    Calls travel in chunks sized from the calibration (about ``CHUNK_S`` of
    work each), since one round trip through a pipe costs about as much as a
    short call. Results are always handed out in input order, so the state is
    exact; ``deterministic=False`` is accepted and behaves the same.
    """

    def __init__(self, dataset: Any, ctx: IterContext) -> None:
        self._dataset, self._ctx = dataset, ctx
        parent = dataset._parents[0]
        self._length = parent._length()
        self._parent_iter = None if self._length is not None else parent._make_iterator(ctx)
        self._pool: WorkerPool | None = None
        self._reset(0, None if self._parent_iter is None else self._parent_iter.get_state())

    def _reset(self, index: int, parent_state: dict | None) -> None:
        self._next_out = self._next_in = index
        self._pending: collections.deque[tuple[int, int]] = collections.deque()  # (pool key, number of elements)
        self._ready: collections.deque[Any] = collections.deque()
        self._state_after: dict[int, dict | None] = {index - 1: parent_state}
        self._input_done = False
        self._calibration = Calibration(self._dataset._num_parallel_calls)
        self._chunk = 1
        self._window = 0

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {self._INDEX: self._next_out, self._EPOCH: self._ctx.epoch, self._SEED: self._ctx.seed}
        if self._parent_iter is not None:
            state[self._PARENT] = self._state_after[self._next_out - 1]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        self._close_pool()
        self._ctx = self._ctx.at(seed=int(state[self._SEED]), epoch=int(state[self._EPOCH]))
        if self._parent_iter is not None:
            self._parent_iter.set_state(state[self._PARENT])
        self._reset(int(state[self._INDEX]), state.get(self._PARENT))

    def __next__(self) -> Any:
        if self._pool is None and (self._calibration.inline is not False or len(self._calibration.timings) < CALIBRATION_CALLS):
            return self._next_inline()
        if self._pool is None:
            self._start_pool()
        self._fill_window()
        if not self._ready:
            if not self._pending:
                raise StopIteration
            self._receive_chunk()
        out = self._ready.popleft()
        self._next_out += 1
        self._state_after.pop(self._next_out - 2, None)
        return out

    def _next_inline(self) -> Any:
        index = self._next_out
        element = self._pull(fetch=True)
        out = timed_call(self._dataset._fn, element, index, self._calibration)
        self._next_out += 1
        self._state_after.pop(index - 1, None)
        return out

    def _start_pool(self) -> None:
        self._pool = WorkerPool(self._dataset, worker_count(self._dataset._num_parallel_calls))
        mean_call = sum(self._calibration.timings) / max(1, len(self._calibration.timings))
        self._chunk = max(1, min(256, int(CHUNK_S / max(mean_call, 1e-6))))
        self._window = 2 * len(self._pool.processes)  # chunks in flight

    def _pull(self, *, fetch: bool) -> Any:
        """The next input: the element itself (inline), or an index / encoded element for a worker."""
        index = self._next_in
        if self._parent_iter is None:
            if self._length != INFINITE_CARDINALITY and index >= self._length:
                raise StopIteration
            self._next_in += 1
            return self._dataset._parents[0]._get(index, self._ctx) if fetch else index
        element = next(self._parent_iter)
        self._next_in += 1
        self._state_after[index] = self._parent_iter.get_state()
        return element if fetch else _encode(element)

    def _fill_window(self) -> None:
        assert self._pool is not None
        while not self._input_done and len(self._pending) < self._window:
            inputs = []
            for _ in range(self._chunk):
                try:
                    inputs.append(self._pull(fetch=False))
                except StopIteration:
                    self._input_done = True
                    break
            if inputs:
                kind = "indices" if self._parent_iter is None else "elements"
                self._pending.append((self._pool.submit(kind, inputs, self._ctx), len(inputs)))

    def _receive_chunk(self) -> None:
        assert self._pool is not None
        key, count = self._pending.popleft()
        if self._calibration.autotune and not self._pool.ready(key):
            self._widen_window()
        first = self._next_out
        self._ready.extend(self._pool.get(key, where=f"elements {first}..{first + count - 1}"))

    def _widen_window(self) -> None:
        assert self._pool is not None
        cap = _MAX_WINDOW_PER_WORKER * len(self._pool.processes)
        budget = self._dataset.options().autotune.ram_budget
        if self._calibration.result_bytes:
            cap = min(cap, max(len(self._pool.processes), budget // (self._calibration.result_bytes * self._chunk)))
        self._window = min(cap, self._window + 1)

    def _close_pool(self) -> None:
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.close()

    def close(self) -> None:
        self._close_pool()
        parent = getattr(self, "_parent_iter", None)
        if parent is not None:
            parent.close()


def _worker_main(dataset: Any, tasks: Any, results: Any, parent_pid: int) -> None:
    _close_listening_sockets()
    # NOTE: a watchdog, not PR_SET_PDEATHSIG: that fires when the forking *thread*
    # ends, and a pool may be forked from a prefetch thread. Whatever ends the
    # consumer (SIGKILL included), its workers follow within _ORPHAN_POLL_S.
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    # A result bigger than the pipe holds leaves the queue's feeder thread blocked
    # in write() once the consumer is gone; exiting must not wait for it.
    results.cancel_join_thread()
    torch.set_num_threads(1)  # the workers together, not each, use the cores
    # NOTE: forked after the consumer may have initialised CUDA, which a forked child cannot use: Keras ops in
    # map_func run on the CPU here (input elements are computed on the CPU; the strategy moves batches later).
    # Keras's adapter only where Keras is loaded (as in call_with_element): it imports stratagem.models, 0.2 s of
    # CPU in each worker of each new pool where the consumer had not (the TFRecord bench: every epoch, 0.79 -> 0.91 s).
    # A Keras that map_func imports here later reads the variable.
    if "keras" in sys.modules:
        from stratagem.models.keras_internals import run_keras_on_cpu

        run_keras_on_cpu()
    else:
        os.environ["KERAS_TORCH_DEVICE"] = "cpu"
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle
    parent, fn = dataset._parents[0], dataset._fn
    while True:
        try:
            task = tasks.get(timeout=1.0)
        except queue.Empty:
            continue
        if task is None:
            return
        key, kind, payload, (seed, epoch) = task
        ctx = IterContext(seed=seed, epoch=epoch)
        try:
            if kind == "indices":
                out: Any = [call_with_element(fn, parent._get(i, ctx)) for i in payload]
            else:
                out = [call_with_element(fn, element) for element in _decode(payload)]
            results.put((key, "ok", _encode(out)))
        except BaseException as err:  # reported to the consumer, which stops every worker
            cause = _picklable(err.__cause__) if err.__cause__ is not None else None
            results.put((key, "error", (_picklable(err), cause, f"{type(err).__name__}: {err}\n{traceback.format_exc()}")))


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_ORPHAN_POLL_S)
    os._exit(0)  # no clean-up: nobody is left to receive results


def _close_listening_sockets() -> None:
    """Closes this forked worker's copies of the parent's listening sockets (Linux; elsewhere a no-op).

    Why: a fork inherits every descriptor, so a worker would keep the job's
    rendezvous and gloo ports bound after its replica died, and a relaunch on
    the same port would fail with "Address already in use". Workers talk to
    the consumer through pipes only; other descriptors (files a pipeline
    reads) stay open.
    """
    if not os.path.isdir("/proc/self/fd"):
        return
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        except OSError:
            listening = 0
        sock.detach()  # the descriptor is closed below, or left as it was
        if listening:
            os.close(fd)


class _TensorLeaf:
    """A torch tensor travelling as a numpy array (no shared-memory file descriptors to leak)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _encode(structure: Any) -> Any:
    return map_structure(lambda leaf: _TensorLeaf(leaf.detach().cpu().numpy()) if isinstance(leaf, torch.Tensor) else leaf,
                         structure)


def _decode(structure: Any) -> Any:
    return map_structure(lambda leaf: torch.from_numpy(leaf.array) if isinstance(leaf, _TensorLeaf) else leaf, structure)


def _picklable(err: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        return MapFunctionError(f"{type(err).__name__}: {err}")
