"""Turns what ``fit``/``evaluate``/``predict`` receive into this replica's batches.

Each adapter yields ``(local_batch, global_batch_size, positions)``:
``positions`` are the global indices of the local rows (``predict`` uses them
to put gathered outputs back in order). Every process walks the same global
batches in the same order, so the replicas always run the same number of
steps and each example of a batch goes to exactly one replica.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from stratagem._nest import batch_size_of, map_structure
from stratagem.data.distributed import DistributedDataset, _as_tensor
from stratagem.distribute.input_context import check_global_batch_size, replica_slice
from stratagem.distribute.strategy import Strategy

Batch = tuple[Any, int, torch.Tensor]


class ArrayAdapter:
    """In-memory arrays or tensors (and tuples/dicts of them), batched by ``batch_size``."""

    def __init__(self, data: Any, *, batch_size: int, shuffle: bool, seed: int, strategy: Strategy) -> None:
        self.data = map_structure(_as_tensor, data)
        self.num_samples = batch_size_of(self.data)
        _check_same_length(self.data, self.num_samples)
        check_global_batch_size(batch_size, strategy.num_replicas_in_sync)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.replicas, self.replica_id = strategy.num_replicas_in_sync, strategy.replica_id_in_sync_group
        self.steps = -(-self.num_samples // batch_size)
        self._position = {"pass": 0, "step": 0}

    def position(self) -> dict[str, Any]:
        """Where the data stands: the agreed shuffle seed, the pass, batches taken in it."""
        return {"seed": self.seed, **self._position}

    def restore(self, position: dict[str, Any]) -> None:
        self.seed = int(position["seed"])

    def epoch(self, epoch: int, resume: dict[str, Any] | None = None) -> Iterator[Batch]:
        start_step = 0
        if resume is not None:
            epoch, start_step = int(resume["pass"]), int(resume["step"])
        if self.shuffle:
            # Same seed on every replica (fit agrees on it first), so they all
            # cut the same global batches and keep disjoint shares of them.
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.num_samples, generator=generator)
        else:
            order = torch.arange(self.num_samples)
        for step, start in enumerate(range(start_step * self.batch_size, self.num_samples, self.batch_size), start_step):
            rows = order[start : start + self.batch_size]
            mine = rows[replica_slice(len(rows), self.replicas, self.replica_id)]
            self._position = {"pass": epoch, "step": step + 1}  # as seen after this batch is consumed
            yield map_structure(lambda t: t[mine], self.data), len(rows), mine


class IterableAdapter:
    """Any iterable of global batches (``(x, y)`` tuples, a DataLoader, a ``DistributedDataset``)."""

    def __init__(self, data: Iterable[Any], *, strategy: Strategy) -> None:
        if isinstance(data, DistributedDataset):
            self.source = data
        else:
            self.source = strategy.experimental_distribute_dataset(data)
        self.replicas, self.replica_id = strategy.num_replicas_in_sync, strategy.replica_id_in_sync_group
        self.num_samples: int | None = None
        self._state: dict[str, Any] | None = None
        try:
            length = len(data)  # type: ignore[arg-type]
        except TypeError:
            length = None
        self.steps: int | None = length if length is not None and length >= 0 else None

    def position(self) -> dict[str, Any]:
        """The distributed iterator's state (Datasets only) and the agreed shuffle seed."""
        return {"seed": getattr(self.source, "_seed", None), "iterator": self._state}

    def restore(self, position: dict[str, Any]) -> None:
        if position.get("seed") is not None:
            self.source._seed = int(position["seed"])

    def epoch(self, epoch: int, resume: dict[str, Any] | None = None) -> Iterator[Batch]:
        # Made here, on the training thread: making it may agree on a seed, a collective.
        iterator = self.source.iterator(epoch=epoch)
        if resume is not None and resume.get("iterator") is not None:
            iterator.set_state(resume["iterator"])
        self._state = _state_of(iterator)
        if iterator.needs_main_thread:  # a collective every step: never from a second thread
            for item, state in _steps(iterator):
                self._state = state
                yield item
            return
        # Everything else runs BACKGROUND_DEPTH steps ahead in a thread, so the
        # training thread only takes ready batches (fit's input wait stays small).
        for item, state in _background(_steps(iterator)):
            self._state = state  # the position after this batch, not after the look-ahead
            yield item


BACKGROUND_DEPTH = 2


def _state_of(iterator: Any) -> dict[str, Any] | None:
    try:
        return iterator.get_state()
    except TypeError:  # a plain iterable: no position to save
        return None


def _steps(iterator: Any) -> Iterator[tuple[Batch, dict[str, Any] | None]]:
    while True:
        try:
            local, global_size, positions = iterator.next_with_info()
        except StopIteration:
            return
        yield (local, global_size, torch.as_tensor(list(positions), dtype=torch.long)), _state_of(iterator)


def _background(items: Iterator[Any], depth: int = BACKGROUND_DEPTH) -> Iterator[Any]:
    """Runs ``items`` in a daemon thread, ``depth`` ahead; errors re-raise here; stops with the consumer."""
    ready: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        ready.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put(("end", None))
        except BaseException as err:  # handed to the training thread, which re-raises it
            ready.put(("error", err))

    thread = threading.Thread(target=produce, name="stratagem-fit-input", daemon=True)
    thread.start()
    try:
        while True:
            kind, payload = ready.get()
            if kind == "end":
                return
            if kind == "error":
                raise payload
            yield payload
    finally:
        stop.set()
        thread.join(timeout=5.0)


def make_adapter(x: Any, y: Any, sample_weight: Any, *, batch_size: int | None, shuffle: bool, seed: int,
                 strategy: Strategy) -> ArrayAdapter | IterableAdapter:
    """Picks the adapter for ``x`` (arrays/tensors, or an iterable of batches)."""
    if _is_array(x) or (isinstance(x, (tuple, list, dict)) and _is_array(_first(x))):
        data = tuple(d for d in (x, y, sample_weight) if d is not None)
        data = data if len(data) > 1 else data[0]
        return ArrayAdapter(data, batch_size=batch_size or 32, shuffle=shuffle, seed=seed, strategy=strategy)
    if y is not None:
        raise ValueError(
            "y must be None when x is an iterable of batches (it yields (x, y) pairs itself). "
            f"Received: x of type {type(x).__name__}, y of type {type(y).__name__}"
        )
    if batch_size is not None:
        raise ValueError(
            "batch_size must not be given when x yields batches: the batches are already made. "
            f"Received: batch_size={batch_size}"
        )
    if not isinstance(x, Iterable):
        raise TypeError(f"x must be arrays, tensors or an iterable of batches. Received: x of type {type(x).__name__}")
    return IterableAdapter(x, strategy=strategy)


def unpack(data: Any) -> tuple[Any, Any, Any]:
    """Splits a batch into ``(x, y, sample_weight)`` as Keras does."""
    if isinstance(data, (tuple, list)):
        if len(data) == 1:
            return data[0], None, None
        if len(data) == 2:
            return data[0], data[1], None
        if len(data) == 3:
            return data[0], data[1], data[2]
        raise ValueError(f"A batch must be x, (x,), (x, y) or (x, y, sample_weight). Received: a tuple of {len(data)}")
    return data, None, None


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, torch.Tensor))


def _first(structure: Any) -> Any:
    return next(iter(structure.values())) if isinstance(structure, dict) else (structure[0] if structure else None)


def _check_same_length(data: Any, expected: int) -> None:
    lengths: list[int] = []
    map_structure(lambda t: lengths.append(int(t.shape[0])), data)
    if any(length != expected for length in lengths):
        raise ValueError(
            "x, y and sample_weight must have the same number of examples (first axis). "
            f"Received: lengths={lengths}"
        )
