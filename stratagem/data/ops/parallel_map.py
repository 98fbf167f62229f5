"""Parallel ``map``: calls run in forked worker processes, in order, with AUTOTUNE.

Why processes: a Python ``map_func`` holds the GIL, so threads would run it
one call at a time. Workers are forked (as torch's DataLoader does on Linux),
so they inherit the pipeline and ``map_func`` needs no pickling, lambdas
included; elements travel through local pipes. Over a random-access parent a
worker receives only an index and also computes the upstream element, so the
whole chain runs in parallel.

AUTOTUNE (``num_parallel_calls=AUTOTUNE``):

1. Calibrate: the first few calls run inline, timing ``map_func``. If a call
   takes less than ``_MIN_CALL_S`` the function is cheaper than moving its
   result between processes, and the map stays inline (parallelism 1).
2. Otherwise start one worker per available core and keep a window of
   calls in flight, starting at one per worker.
3. Each time the consumer finds the next result not ready (the map is the
   bottleneck), widen the window by one, up to four per worker and to what
   fits the memory budget (``Options().autotune.ram_budget`` divided by the
   measured size of one result). A consumer that never waits leaves it alone.

The window, not the worker count, is what adapts: it bounds memory (at most
``window`` results are buffered) and hides jitter between calls.

An exception in ``map_func`` reaches the consumer when its element is due,
with the element index and the worker's traceback, and every worker is
stopped. A worker that dies is reported with its exit code.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from typing import Any

import numpy as np
import torch

from stratagem._nest import map_structure
from stratagem._process import die_with_parent
from stratagem.data._structure import call_with_element, leaves
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.options import AUTOTUNE, INFINITE_CARDINALITY

_MIN_CALL_S = 2e-4
_CALIBRATION_CALLS = 4
_POLL_S = 0.1
_MAX_WINDOW_PER_WORKER = 4


class MapFunctionError(RuntimeError):
    """Carries the worker-side traceback of a failed ``map_func`` call (the ``__cause__``)."""


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class ParallelMapIterator(DatasetIterator):
    """Iterator of a ``MapDataset`` with ``num_parallel_calls`` set."""

    _INDEX = "index"
    _EPOCH = "epoch"
    _SEED = "seed"
    _PARENT = "parent"

    def __init__(self, dataset: Any, ctx: IterContext) -> None:
        self._dataset, self._ctx = dataset, ctx
        parent = dataset._parents[0]
        self._random_access = parent._length() is not None
        self._length = parent._length() if self._random_access else None
        self._parent_iter = None if self._random_access else parent._make_iterator(ctx)
        self._autotune = dataset._num_parallel_calls == AUTOTUNE
        self._budget = dataset.options().autotune.ram_budget
        self._workers: list[Any] = []
        self._reset_position(0, None if self._random_access else self._parent_iter.get_state())

    # ---- position ------------------------------------------------------------
    def _reset_position(self, index: int, parent_state: dict | None) -> None:
        self._next_out = index               # next element to hand to the consumer
        self._next_in = index                # next element to start computing
        self._done: dict[int, tuple[str, Any]] = {}
        self._state_after: dict[int, dict | None] = {index - 1: parent_state}
        self._input_done = False
        self._calibration: list[float] = []
        self._inline = not self._autotune and int(self._dataset._num_parallel_calls) == 1
        self._window = 0
        self._result_bytes = 0

    def get_state(self) -> dict[str, Any]:
        if not self._dataset._deterministic:
            raise ValueError(
                "A map with deterministic=False has no exact position to save: results are taken as they "
                "finish. Use deterministic=True (the default) for pipelines you checkpoint."
            )
        state = {self._INDEX: self._next_out, self._EPOCH: self._ctx.epoch, self._SEED: self._ctx.seed}
        if not self._random_access:
            state[self._PARENT] = self._state_after[self._next_out - 1]
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        self.close()
        self._ctx = IterContext(seed=int(state[self._SEED]), epoch=int(state[self._EPOCH]))
        if not self._random_access:
            self._parent_iter.set_state(state[self._PARENT])
        self._reset_position(int(state[self._INDEX]), state.get(self._PARENT))

    # ---- producing -------------------------------------------------------------
    def __next__(self) -> Any:
        if self._inline or len(self._calibration) < _CALIBRATION_CALLS and self._autotune and not self._workers:
            return self._next_inline()
        if not self._workers:
            self._start_workers()
        self._fill_window()
        if self._next_out not in self._done and self._next_in == self._next_out:
            raise StopIteration
        return self._take_result()

    def _next_inline(self) -> Any:
        element = self._pull_input()
        start = time.perf_counter()
        try:
            out = call_with_element(self._dataset._fn, element)
        except Exception as err:
            err.add_note(f"(in map function, on element {self._next_out})")
            raise
        self._calibration.append(time.perf_counter() - start)
        self._next_out += 1
        self._state_after.pop(self._next_out - 2, None)
        if self._autotune and len(self._calibration) == _CALIBRATION_CALLS:
            self._inline = min(self._calibration) < _MIN_CALL_S or available_cores() == 1
            self._result_bytes = _nbytes(out)
        return out

    def _pull_input(self) -> Any:
        """The next input: an index (random-access parent) or an element (streaming parent)."""
        index = self._next_in
        if self._random_access:
            if self._length not in (None, INFINITE_CARDINALITY) and index >= self._length:
                raise StopIteration
            self._next_in += 1
            return self._dataset._parents[0]._get(index, self._ctx) if self._inline_or_calibrating() else index
        element = next(self._parent_iter)
        self._next_in += 1
        self._state_after[index] = self._parent_iter.get_state()
        return element

    def _inline_or_calibrating(self) -> bool:
        return not self._workers

    def _start_workers(self) -> None:
        count = available_cores() if self._autotune else int(self._dataset._num_parallel_calls)
        context = mp.get_context("fork")
        self._tasks: Any = context.Queue()
        self._results: Any = context.Queue()
        for _ in range(count):
            process = context.Process(
                target=_worker_main, args=(self._dataset, self._ctx, self._random_access, self._tasks, self._results),
                daemon=True,
            )
            process.start()
            self._workers.append(process)
        self._window = count

    def _fill_window(self) -> None:
        while not self._input_done and self._next_in - self._next_out < self._window:
            index = self._next_in
            try:
                payload = self._pull_input()
            except StopIteration:
                self._input_done = True
                return
            self._tasks.put((index, _encode(payload) if not self._random_access else payload))

    def _take_result(self) -> Any:
        waited = False
        while self._next_out not in self._done:
            waited = True
            try:
                index, status, payload = self._results.get(timeout=_POLL_S)
                self._done[index] = (status, payload)
            except queue.Empty:
                self._check_workers()
            if not self._dataset._deterministic and self._done:
                break
        if waited and self._autotune:
            self._widen_window()
        index = self._next_out if self._next_out in self._done else min(self._done)
        status, payload = self._done.pop(index)
        self._next_out += 1
        self._state_after.pop(self._next_out - 2, None)
        if status == "error":
            self.close()
            raise MapFunctionError(f"map function failed on element {index}: {payload[1]}") from payload[0]
        return _decode(payload)

    def _widen_window(self) -> None:
        cap = _MAX_WINDOW_PER_WORKER * len(self._workers)
        if self._result_bytes:
            cap = min(cap, max(len(self._workers), self._budget // self._result_bytes))
        self._window = min(cap, self._window + 1)

    def _check_workers(self) -> None:
        for number, process in enumerate(self._workers):
            if process.exitcode is not None:
                code = process.exitcode
                self.close()
                raise RuntimeError(
                    f"map worker process {number} died (exit code {code}) while computing element "
                    f"{self._next_out}; the map's other workers were stopped. A negative code is the signal "
                    "that killed it (e.g. -9: out of memory)."
                )

    def close(self) -> None:
        workers, self._workers = getattr(self, "_workers", []), []
        for _ in workers:
            self._tasks.put(None)
        deadline = time.monotonic() + 2.0
        for process in workers:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(timeout=2.0)
        if workers:
            self._tasks.close()
            self._results.close()


def _worker_main(dataset: Any, ctx: IterContext, random_access: bool, tasks: Any, results: Any) -> None:
    die_with_parent()
    torch.set_num_threads(1)  # the workers together, not each, should use the cores
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle
    parent = dataset._parents[0]
    while True:
        task = tasks.get()
        if task is None:
            return
        index, payload = task
        try:
            element = parent._get(payload, ctx) if random_access else _decode(payload)
            results.put((index, "ok", _encode(call_with_element(dataset._fn, element))))
        except BaseException as err:  # reported to the consumer, which stops every worker
            results.put((index, "error", (_picklable(err), f"{type(err).__name__}: {err}\n{traceback.format_exc()}")))


class _TensorLeaf:
    """A torch tensor travelling as a numpy array (avoids shared-memory file descriptors)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _encode(structure: Any) -> Any:
    return map_structure(lambda leaf: _TensorLeaf(leaf.detach().cpu().numpy()) if isinstance(leaf, torch.Tensor) else leaf,
                         structure)


def _decode(structure: Any) -> Any:
    return map_structure(lambda leaf: torch.from_numpy(leaf.array) if isinstance(leaf, _TensorLeaf) else leaf, structure)


def _picklable(err: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        return RuntimeError(f"{type(err).__name__}: {err}")


def _nbytes(structure: Any) -> int:
    return int(sum(getattr(leaf, "nbytes", 8) for leaf in leaves(structure)))
