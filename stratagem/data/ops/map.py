"""``MapDataset``: ``map_func`` applied to each element.

Over a random-access parent the map is random-access too (element ``i`` is
``map_func(parent[i])``), and a ``vectorized`` function is called once per
batch by a following ``batch``. With ``num_parallel_calls`` the calls run in
worker processes (``stratagem.data.ops.parallel_map``).

Map vectorisation (tf.data's ``map_vectorization`` idea): a per-element
function that a following ``batch`` (or a cache filling in chunks) asks for
several elements at once runs once on the whole batch of rows where that gives
the same elements. By default the batch call is made under ``torch.func.vmap``
(``stratagem/data/_per_row.py``), which gives each row exactly the computation
one element gets, and raises on everything that could make a row differ (a
branch on a value, ``.item()``, ``.numpy()``, random ops); whatever raises or
returns anything but tensors is computed per element, for good, at this node.
The first time, one element computed per element is compared with row 0
(types, dtypes, shapes, values). No row is sampled: a function that could
differ on row 7 of batch 3 cannot run under vmap. Functions written with
numpy (``img.astype``) do not run under vmap and stay per element. Three ways
to choose otherwise:

- ``map(fn, vectorized=True)``: the user declares that ``fn`` works on
  batches; one plain call per batch, no check.
- ``options.experimental_optimization.map_vectorization = False``: always per
  element.
- ``options.experimental_optimization.map_vectorization = True`` (a pipeline
  option named after TF 2.0-2.5's switch): where vmap cannot run the function
  (numpy functions), a sampled check of a plain batch call. The first batch
  call is checked on every row of its batch (up to ``_PROBE``), computed per
  element, and kept only if its rows equal the stacked per-element results
  exactly (structure, leaf types, dtypes, shapes, values); every later batch
  call is checked on its first and last rows. A mismatch turns it off for the
  node and that batch is recomputed per element. A function that differs
  only on middle rows of a later batch is NOT caught: that is what the switch
  accepts. The checked rows are computed twice, so a function with side
  effects (a counter) sees those extra calls.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from stratagem.data._per_row import call_per_row
from stratagem.data._python_values import map_output
from stratagem.data._structure import call_with_element, leaves, same_elements, stack, take_rows, unstack
from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext, Pending, ParentPositionIterator


class MapDataset(Dataset):
    """Applies ``map_func``; see ``Dataset.map``."""

    def __init__(self, parent: Dataset, map_func: Callable[..., Any], *, num_parallel_calls: int | None,
                 deterministic: bool | None, vectorized: bool) -> None:
        super().__init__(parent)
        if not callable(map_func):
            raise TypeError(f"map_func must be callable. Received: map_func of type {type(map_func).__name__}")
        if num_parallel_calls is not None:
            _check_positive("num_parallel_calls", num_parallel_calls, allow_autotune=True)
        self._fn = _MapFunction(map_func)
        self._num_parallel_calls = num_parallel_calls
        self._deterministic = True if deterministic is None else deterministic
        self._vectorized = vectorized
        self._calibration: Any = None
        self._pool: Any = None
        self._pool_lock = threading.Lock()
        self._row_calls: bool | None = None  # vmapped batch calls: None until tried, then the verdict
        self._batch_calls: bool | None = None  # sampled plain batch calls (the switch): the same
        self._batch_calls_lock = threading.Lock()

    def _length(self) -> int | None:
        return self._parents[0]._length()

    def _get(self, index: int, ctx: IterContext) -> Any:
        return call_with_element(self._fn, self._parents[0]._get(index, ctx))

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        return self._submit_many(indices, ctx).result()

    def _submit_many(self, indices: Sequence[int], ctx: IterContext) -> Pending:
        if self._vectorized:  # one call for the whole batch, once the parent's rows are there
            return self._parents[0]._submit_many(indices, ctx).then(lambda batch: call_with_element(self._fn, batch))
        if not indices:
            return Pending(lambda: Dataset._get_many(self, indices, ctx))
        done: list[Any] = []
        if len(indices) >= 2 and ctx.map_vectorization is not False:
            batch, done = self._batch_call(indices, ctx)
            if batch is not None:
                return Pending(lambda: batch)
        rest = indices[len(done):]  # the probe's per-element results are kept: each element computed once
        if not rest:
            return Pending(lambda: stack(done))
        if self._num_parallel_calls is None:
            return Pending(lambda: stack(done + [self._get(i, ctx) for i in rest]))
        return self._parallel_submit(rest, ctx).then(lambda tail: stack(done + list(tail)))

    def _batch_call(self, indices: Sequence[int], ctx: IterContext) -> tuple[Any | None, list[Any]]:
        """``(map_func on the rows at indices, [])`` where that gives the same elements.

        Else ``(None, elements computed one by one)``: a check's, kept so none is computed again.
        """
        if self._row_calls is False and (not ctx.map_vectorization or self._batch_calls is False):
            return None, []
        rows = self._rows(indices, ctx)
        if rows is None:
            return None, []
        tried = bool(self._row_calls)
        if tried:  # decided: no lock, so batches of several prefetch threads run side by side
            batch = call_per_row(self._fn.fn, rows, len(indices))
            if batch is not None:
                return batch, []
        with self._batch_calls_lock:
            if self._row_calls is None or (self._row_calls and not tried):  # undecided, or decided while we waited
                batch = call_per_row(self._fn.fn, rows, len(indices))
                if batch is not None and self._row_calls:
                    return batch, []
                if batch is not None:
                    first = self._get(indices[0], ctx)  # once: row 0 against the element computed alone
                    self._row_calls = _rows_match(batch, 0, [first])
                    if self._row_calls:
                        return batch, []
                    if not ctx.map_vectorization:
                        return None, [first]
            self._row_calls = False  # vmap refused it (or gave another row 0): per element from now on
            if not ctx.map_vectorization or self._batch_calls is False:
                return None, []
            return self._sampled_batch_call(rows, indices, ctx)

    def _sampled_batch_call(self, rows: Any, indices: Sequence[int], ctx: IterContext) -> tuple[Any | None, list[Any]]:
        """The opt-in switch's plain batch call, checked on sampled rows (module docstring)."""
        decided = self._batch_calls
        batch = self._call_on_rows(rows)
        if batch is None or not _is_batch(batch, len(indices)):
            self._batch_calls = False  # raised, or no batch of len(indices) rows: decided without a probe
            return None, []
        if decided is None:
            probe = [self._probe_call(i, ctx) for i in indices[:_PROBE]]
            self._batch_calls = _rows_match(batch, 0, probe)
            return (batch, []) if self._batch_calls else (None, probe)
        # Checked again on every later batch: its first and last rows, computed per element.
        last = len(indices) - 1
        self._batch_calls = (_rows_match(batch, 0, [self._get(indices[0], ctx)])
                             and _rows_match(batch, last, [self._get(indices[last], ctx)]))
        return (batch, []) if self._batch_calls else (None, [])

    def _probe_call(self, index: int, ctx: IterContext) -> Any:
        """Element ``index`` computed alone; under ``num_parallel_calls`` the call also counts as calibration."""
        if self._num_parallel_calls is None:
            return self._get(index, ctx)
        from stratagem.data.ops import parallel_map

        with self._pool_lock:
            if self._calibration is None:
                self._calibration = parallel_map.Calibration(self._num_parallel_calls)  # type: ignore[arg-type]
        return parallel_map.timed_call(self._fn, self._parents[0]._get(index, ctx), index, self._calibration)

    def _rows(self, indices: Sequence[int], ctx: IterContext) -> Any | None:
        try:
            return self._parents[0]._get_many(indices, ctx)
        except Exception:  # noqa: BLE001  (the per-element path that runs instead raises it again, per element)
            return None

    def _call_on_rows(self, rows: Any) -> Any | None:
        try:
            return call_with_element(self._fn, rows)
        except Exception:  # noqa: BLE001  (a function written for one element may fail on a batch in any way;
            return None    # a real error is raised again by the per-element path that runs instead)

    def _parallel_submit(self, indices: Sequence[int], ctx: IterContext) -> Pending:
        # A batch above asks for B elements at once: they go to the worker pool
        # (shared by every fetch of this node) after AUTOTUNE calibration.
        from stratagem.data.ops import parallel_map

        with self._pool_lock:
            if self._calibration is None:
                self._calibration = parallel_map.Calibration(self._num_parallel_calls)  # type: ignore[arg-type]
            calibration = self._calibration
            done: list[Any] = []
            if calibration.inline is not False:
                # One vectorised gather of the parent's rows, then a call per row
                # view, until calibration decides for workers: they take the rest.
                rows = unstack(self._parents[0]._get_many(indices, ctx))
                for i, row in zip(indices, rows):
                    if calibration.inline is False:
                        break
                    done.append(parallel_map.timed_call(self._fn, row, i, calibration))
                if len(done) == len(indices):
                    return Pending(lambda: done)
            if self._pool is None or not self._pool.processes:
                self._pool = parallel_map.WorkerPool(self, parallel_map.worker_count(self._num_parallel_calls))  # type: ignore[arg-type]
                weakref.finalize(self, self._pool.close)
            rest = parallel_map.submit_many(self._pool, indices[len(done):], ctx)
            return rest.then(lambda tail: done + list(tail)) if done else rest

    def _expect_order(self, order: np.ndarray, ctx: IterContext) -> None:
        self._parents[0]._expect_order(order, ctx)

    def _rows_independent(self, ctx: IterContext) -> bool:
        # Only once a batch call has run under vmap (sound by construction, no random draw) and batch calls stay on.
        return (not self._vectorized and self._row_calls is True and ctx.map_vectorization is not False
                and self._parents[0]._rows_independent(ctx))

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._num_parallel_calls is not None:
            from stratagem.data.ops.parallel_map import ParallelMapIterator

            return ParallelMapIterator(self, ctx)
        return super()._make_iterator(ctx)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _StreamingMapIterator(self._parents[0]._make_iterator(ctx), self._fn)

    def __getstate__(self) -> dict[str, Any]:
        # A copy (copy.copy, in pipeline rewriting) gets its own pool and lock, never this node's.
        state = dict(self.__dict__)
        state.update(_pool=None, _pool_lock=threading.Lock(), _batch_calls_lock=threading.Lock())
        return state

    def __str__(self) -> str:
        name = getattr(self._fn, "__name__", "fn")
        return f"MapDataset({name}, num_parallel_calls={self._num_parallel_calls}) <- {self._parents[0]}"


_PROBE = 256  # rows of the first batch computed both ways (the whole batch, up to this many)


def _is_batch(structure: Any, num_rows: int) -> bool:
    """Whether every leaf of ``structure`` is an array or tensor of ``num_rows`` rows."""
    parts = leaves(structure)
    return bool(parts) and all(isinstance(leaf, (np.ndarray, torch.Tensor)) and leaf.ndim >= 1
                               and leaf.shape[0] == num_rows for leaf in parts)


def _rows_match(batch: Any, start: int, elements: list[Any]) -> bool:
    """Whether rows ``start..`` of ``batch`` are ``elements`` stacked (False where ``batch`` has no such rows)."""
    try:
        return same_elements(take_rows(batch, slice(start, start + len(elements))), stack(elements))
    except (TypeError, IndexError, KeyError, ValueError, RuntimeError):  # leaves that are no batch; ragged elements
        return False


class _MapFunction:
    """``map_func`` with tf.data's view of its result: a returned list is a tuple, Python numbers are int32/float32."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.__name__ = fn, getattr(fn, "__name__", "fn")

    def __call__(self, *args: Any) -> Any:
        return map_output(self.fn(*args))


class _StreamingMapIterator(ParentPositionIterator):
    def __init__(self, parent: DatasetIterator, fn: Callable[..., Any]) -> None:
        self._parent, self._fn = parent, fn

    def __next__(self) -> Any:
        return call_with_element(self._fn, next(self._parent))
