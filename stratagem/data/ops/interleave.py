"""``InterleaveDataset``: maps elements to datasets and interleaves them, tf.data's semantics.

``cycle_length`` slots are open; the output takes ``block_length`` elements from each in turn, and an exhausted slot
takes the next input element's dataset. With ``num_parallel_calls`` each slot is advanced by a daemon thread into a
bounded buffer, so I/O overlaps; the order stays sequential unless ``deterministic=False``. A slot's state is the
parent's state before its element was pulled plus the child's, so restoring re-pulls each slot's element (one
``set_state`` + ``next``) and never replays the input.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from typing_extensions import override

from stratagem.data._exit_threads import stop_at_exit
from stratagem.data._structure import call_with_element
from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops.shuffle import mix_seed
from stratagem.data.options import AUTOTUNE

logger = logging.getLogger(__name__)

_BUFFER_SIZE = 4  # elements each producer thread may run ahead of the consumer
_POLL_S = 0.05  # every wait wakes this often to notice close() or a dead thread
_JOIN_TIMEOUT_S = 5.0  # close() waits this long in all for threads stuck inside a child

_ELEMENT, _END, _ERROR = "element", "end", "error"


class InterleaveDataset(Dataset):
    """See ``Dataset.interleave``.

    Args:
        parent: The input dataset.
        map_func: Maps one input element (tuples unpacked into arguments) to a ``Dataset``.
        cycle_length: Input elements open at once; ``None`` or ``AUTOTUNE``: the CPU cores (tf.data's default).
        block_length: Consecutive elements taken from one slot before moving to the next.
        num_parallel_calls: ``None`` to produce in the calling thread, an int or ``AUTOTUNE`` (= ``cycle_length``) to
            produce from the open slots in background threads, at most this many at a time.
        deterministic: With ``num_parallel_calls``, ``False`` lets the output take whichever slot has an element ready
            (default True).

    Example:
        >>> ds = Dataset.range(1, 6).interleave(
        ...     lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
        >>> [int(x) for x in ds][:10]
        [1, 1, 1, 1, 2, 2, 2, 2, 1, 1]
    """

    _OP = "interleave"  # the op's name in messages

    def __init__(self, parent: Dataset, map_func: Callable[..., Dataset], *, cycle_length: int | None,
                 block_length: int, num_parallel_calls: int | None, deterministic: bool | None) -> None:
        super().__init__(parent)
        if not callable(map_func):
            raise TypeError(f"map_func must be callable. Received: map_func of type {type(map_func).__name__}")
        _check_positive("block_length", block_length)
        if cycle_length is not None:
            _check_positive("cycle_length", cycle_length, allow_autotune=True)
        if num_parallel_calls is not None:
            _check_positive("num_parallel_calls", num_parallel_calls, allow_autotune=True)
        self._map_func = map_func
        # tf.data's default: as many open inputs as CPU cores
        self.cycle_length = (os.cpu_count() or 1) if cycle_length in (None, AUTOTUNE) else int(cycle_length)
        self.block_length = int(block_length)
        self.num_parallel_calls = _resolve_parallel_calls(num_parallel_calls, cycle_length, self.cycle_length)
        self.deterministic = True if deterministic is None else bool(deterministic)

    def make_child(self, element: Any) -> Dataset:
        """``map_func(element)``, checked to be a ``Dataset``."""
        child = call_with_element(self._map_func, element)
        if not isinstance(child, Dataset):
            raise TypeError(f"{self._OP}'s map_func must return a Dataset for each input element (wrap arrays with "
                            "Dataset.from_tensor_slices or Dataset.from_tensors). Received: map_func returned a value "
                            f"of type {type(child).__name__}")
        return child

    @override
    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _InterleaveIterator(self, ctx)

    def __str__(self) -> str:
        name = getattr(self._map_func, "__name__", "fn")
        return (f"InterleaveDataset({name}, cycle_length={self.cycle_length}, block_length={self.block_length}, "
                f"num_parallel_calls={self.num_parallel_calls}, deterministic={self.deterministic}) "
                f"<- {self._parents[0]}")


def _resolve_parallel_calls(requested: int | None, cycle_length_arg: int | None, cycle_length: int) -> int | None:
    if requested is None:
        return None
    if requested == AUTOTUNE:
        return cycle_length
    if cycle_length_arg not in (None, AUTOTUNE) and requested > cycle_length:
        # NOTE: tf.data rejects this too: more calls than open slots could never run at once.
        raise ValueError("num_parallel_calls must be at most cycle_length, since only cycle_length children are open "
                         f"at a time. Received: num_parallel_calls={requested}, cycle_length={cycle_length}")
    return min(int(requested), cycle_length)


class _Producer:
    """Advances one child iterator in a daemon thread, a few elements ahead of the consumer.

    The thread alone touches the child and records its state after each element, so the consumer reports the state
    after the elements it has consumed, not those buffered ahead.
    """

    def __init__(self, child: DatasetIterator, *, condition: threading.Condition, calls: threading.Semaphore) -> None:
        self._child = child
        self._condition, self._calls = condition, calls
        self._buffer: collections.deque[tuple[str, Any, Any]] = collections.deque()
        self._consumed_state = child.get_state()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="stratagem-interleave", daemon=True)
        self._thread.start()
        stop_at_exit(self)

    def _run(self) -> None:
        try:
            while True:
                with self._condition:
                    while len(self._buffer) >= _BUFFER_SIZE and not self._stopped:
                        self._condition.wait(_POLL_S)
                if self._stopped:
                    return
                item = self._produce_one()
                with self._condition:
                    self._buffer.append(item)
                    self._condition.notify_all()
                if item[0] != _ELEMENT:
                    return
        finally:
            self._child.close()

    def _produce_one(self) -> tuple[str, Any, Any]:
        # The semaphore caps how many children run next() at once (num_parallel_calls).
        while not self._calls.acquire(timeout=_POLL_S):
            if self._stopped:
                return (_END, None, None)
        try:
            element = next(self._child)
            return (_ELEMENT, element, self._child.get_state())
        except StopIteration:
            return (_END, None, None)
        except BaseException as err:  # handed to the consumer, which re-raises it
            return (_ERROR, err, None)
        finally:
            self._calls.release()

    def ready(self) -> bool:
        """Whether ``next`` would return at once; call with the shared condition held."""
        return bool(self._buffer)

    def __next__(self) -> Any:
        with self._condition:
            while not self._buffer:
                if not self._thread.is_alive():
                    raise RuntimeError("interleave producer thread ended without a result (closed iterator?)")
                self._condition.wait(_POLL_S)
            kind, payload, state = self._buffer.popleft()
            self._condition.notify_all()
        if kind == _END:
            raise StopIteration
        if kind == _ERROR:
            # NOTE: the child's own exception object, so its type and the traceback
            # of the producer thread (where it was raised) reach the caller intact.
            raise payload
        self._consumed_state = state
        return payload

    def get_state(self) -> dict[str, Any]:
        return self._consumed_state

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify_all()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("An interleave producer thread is still inside its child iterator after %.1f s; "
                           "leaving it (daemon) to finish on its own.", timeout)

    def close(self) -> None:
        self.stop()
        self.join(_JOIN_TIMEOUT_S)


@dataclass
class _Slot:
    """One open child: which input element it came from, and how to re-pull that element."""

    input_index: int
    parent_state: dict[str, Any]  # the parent iterator's state just before this slot's element was pulled
    source: DatasetIterator | _Producer  # the child, or the thread that advances it


class _InterleaveIterator(DatasetIterator):
    _SLOTS = "slots"
    _CYCLE_INDEX = "cycle_index"
    _BLOCK_INDEX = "block_index"
    _NUM_INPUTS = "num_inputs"
    _END_OF_INPUT = "end_of_input"
    _INPUT_INDEX = "input_index"
    _PARENT_BEFORE = "parent_before"
    _CHILD = "child"

    def __init__(self, dataset: InterleaveDataset, ctx: IterContext) -> None:
        self._dataset = dataset
        self._condition = threading.Condition()
        self._calls = threading.BoundedSemaphore(dataset.num_parallel_calls or 1)
        self._reset(ctx)

    def _reset(self, ctx: IterContext) -> None:
        self._ctx = ctx
        self._parent = self._dataset._parents[0]._make_iterator(ctx)
        self._slots: list[_Slot | None] | None = None  # opened on the first __next__: making one runs no user code
        self._cycle_index, self._block_index = 0, 0
        self._num_inputs, self._end_of_input = 0, False
        self._closed = False

    # ---- producing elements ------------------------------------------------------
    @override
    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        try:
            if self._slots is None:
                self._slots = [self._open_next_slot() for _ in range(self._dataset.cycle_length)]
            return self._next_element()
        except StopIteration:
            raise
        except BaseException:
            self.close()  # no thread outlives an error
            raise

    def _next_element(self) -> Any:
        """tf.data's cycle; with ``deterministic=False`` (and threads) a slot with nothing ready is passed over."""
        assert self._slots is not None
        any_ready = self._dataset.num_parallel_calls is not None and not self._dataset.deterministic
        while any(slot is not None for slot in self._slots):
            if any_ready:
                with self._condition:
                    ready = self._first_ready_slot()
                    if ready is None:
                        self._condition.wait(_POLL_S)
                        continue
                if ready != self._cycle_index:
                    self._cycle_index, self._block_index = ready, 0
            elif self._slots[self._cycle_index] is None:
                self._advance()
                continue
            produced, element = self._take_from_current()
            if produced:
                return element
        raise StopIteration

    def _first_ready_slot(self) -> int | None:
        assert self._slots is not None
        size = len(self._slots)
        for offset in range(size):
            index = (self._cycle_index + offset) % size
            slot = self._slots[index]
            if slot is not None and isinstance(slot.source, _Producer) and slot.source.ready():
                return index
        return None

    def _take_from_current(self) -> tuple[bool, Any]:
        """One element of the current slot, or ``(False, None)`` if it was exhausted (and replaced)."""
        assert self._slots is not None
        slot = self._slots[self._cycle_index]
        assert slot is not None
        try:
            element = next(slot.source)
        except StopIteration:
            slot.source.close()
            # The next input element takes this slot, but its first block waits
            # for the cycle to come back round (tf.data's order).
            self._slots[self._cycle_index] = self._open_next_slot()
            self._advance()
            return False, None
        self._block_index += 1
        if self._block_index == self._dataset.block_length:
            self._advance()
        return True, element

    def _advance(self) -> None:
        self._cycle_index = (self._cycle_index + 1) % self._dataset.cycle_length
        self._block_index = 0

    def _open_next_slot(self) -> _Slot | None:
        if self._end_of_input:
            return None
        before = self._parent.get_state()
        try:
            element = next(self._parent)
        except StopIteration:
            self._end_of_input = True
            return None
        index, self._num_inputs = self._num_inputs, self._num_inputs + 1
        return self._make_slot(index, before, element, None)

    def _make_slot(self, index: int, parent_state: dict[str, Any], element: Any,
                   child_state: dict[str, Any] | None) -> _Slot:
        # Each child gets its own seed, so unseeded shuffles differ between
        # children yet agree on every worker (all share ctx.seed).
        child_ctx = self._ctx.at(seed=mix_seed(self._ctx.seed, index), epoch=self._ctx.epoch)
        child = self._dataset.make_child(element)._make_iterator(child_ctx)
        if child_state is not None:
            child.set_state(child_state)
        if self._dataset.num_parallel_calls is None:
            return _Slot(index, parent_state, child)
        return _Slot(index, parent_state, _Producer(child, condition=self._condition, calls=self._calls))

    # ---- state ---------------------------------------------------------------------
    @override
    def get_state(self) -> dict[str, Any]:
        slots = None if self._slots is None else [
            None if slot is None else {
                self._INPUT_INDEX: slot.input_index,
                self._PARENT_BEFORE: slot.parent_state,
                self._CHILD: slot.source.get_state(),
            }
            for slot in self._slots
        ]
        return {
            self._SEED: self._ctx.seed, self._EPOCH: self._ctx.epoch, self._PARENT: self._parent.get_state(),
            self._SLOTS: slots, self._CYCLE_INDEX: self._cycle_index, self._BLOCK_INDEX: self._block_index,
            self._NUM_INPUTS: self._num_inputs, self._END_OF_INPUT: self._end_of_input,
        }

    @override
    def set_state(self, state: dict[str, Any]) -> None:
        slots = state[self._SLOTS]
        if slots is not None and len(slots) != self._dataset.cycle_length:
            raise ValueError(
                "This interleave state was saved with a different cycle_length; restore it into the same pipeline. "
                f"Received: {len(slots)} slots in the state, cycle_length={self._dataset.cycle_length}")
        self.close()
        self._reset(self._ctx.at(seed=int(state[self._SEED]), epoch=int(state[self._EPOCH])))
        if slots is not None:
            self._slots = [None if saved is None else self._restore_slot(saved) for saved in slots]
        self._parent.set_state(state[self._PARENT])
        self._cycle_index, self._block_index = int(state[self._CYCLE_INDEX]), int(state[self._BLOCK_INDEX])
        self._num_inputs, self._end_of_input = int(state[self._NUM_INPUTS]), bool(state[self._END_OF_INPUT])

    def _restore_slot(self, saved: dict[str, Any]) -> _Slot:
        """Re-pulls the slot's input element from the parent and rebuilds its child there."""
        parent_state = saved[self._PARENT_BEFORE]
        self._parent.set_state(parent_state)
        try:
            element = next(self._parent)
        except StopIteration as err:
            raise ValueError(
                "This interleave state does not match the pipeline: the input element of an open slot no longer "
                f"exists. Restore the state into the pipeline it was saved from. Received: slot {saved!r}") from err
        return self._make_slot(int(saved[self._INPUT_INDEX]), parent_state, element, saved[self._CHILD])

    @override
    def close(self) -> None:
        sources = [slot.source for slot in (self._slots or []) if slot is not None]
        for source in sources:  # stop every thread first, then wait for all of them together
            if isinstance(source, _Producer):
                source.stop()
            else:
                source.close()
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        for source in sources:
            if isinstance(source, _Producer):
                source.join(max(0.0, deadline - time.monotonic()))
        self._parent.close()
        self._closed = True
