"""``PrefetchDataset``: a background thread keeps up to ``buffer_size`` elements ready.

With ``AUTOTUNE`` elements are first produced inline, and the thread starts
only once the consumer's own work between elements is at least a quarter of
the time spent producing them and at least 50 microseconds per element
(measured over windows of 8; the shortest gap of a window counts for each of
its elements, so one pause is no work): a consumer that does nothing else
gains nothing from a thread and would pay its hand-off.
Once running, the buffer starts at 2 and grows by one each time the
consumer finds it empty, up to 64 elements and to what fits the memory budget
(``Options().autotune.ram_budget`` over the size of one element). The thread
also records the parent's state after each element, so the iterator's state
is exactly "after the last element the consumer took".
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from stratagem.data._exit_threads import EventThread, stop_at_exit
from stratagem.data._structure import nbytes
from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.ops.identity import ForwardingDataset
from stratagem.data.iterator import DatasetIterator, IterContext, ParentPositionIterator
from stratagem.data.options import AUTOTUNE

_MAX_AUTOTUNE_BUFFER = 64
_JOIN_S = 5.0
_INLINE_WINDOW = 8  # AUTOTUNE: elements measured inline before each decision
_OVERLAP_WORTH = 0.25  # ... and the consumer/producer time ratio from which a thread pays
_MIN_CONSUME_S = 5e-5  # ... and the consumer's least work per element: below, the hand-off costs more than it hides


class PrefetchDataset(ForwardingDataset):
    """See ``Dataset.prefetch``; random-access parents stay random-access for sharding and restore."""

    def __init__(self, parent: Dataset, buffer_size: int) -> None:
        super().__init__(parent)
        if buffer_size != 0:
            _check_positive("buffer_size", buffer_size, allow_autotune=True)
        self.buffer_size = buffer_size

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        parent = self._parents[0]._make_iterator(ctx)
        if self.buffer_size == 0:
            return parent
        return PrefetchIterator(parent, self.buffer_size, ram_budget=self.options().autotune.ram_budget)

    def __str__(self) -> str:
        return f"PrefetchDataset({self.buffer_size}) <- {self._parents[0]}"


class PrefetchIterator(ParentPositionIterator):
    """Runs ``parent`` in a daemon thread; errors reach the consumer with their traceback."""

    def __init__(self, parent: DatasetIterator, buffer_size: int, *, ram_budget: int) -> None:
        self._parent = parent
        self._autotune = buffer_size == AUTOTUNE
        self._capacity = 2 if self._autotune else int(buffer_size)
        self._ram_budget = ram_budget
        self._last_bytes = 0
        self._state = parent.get_state()
        self._thread: threading.Thread | None = None
        # AUTOTUNE starts inline and measures: a thread pays only when the consumer does
        # work between batches that producing could overlap; otherwise its hand-off
        # (queue, locks, the GIL going back and forth) is pure cost.
        self._inline = self._autotune
        self._produce_s = 0.0
        self._consume_min = float("inf")  # the consumer's shortest gap between elements in the window
        self._inline_count = 0
        self._returned_at: float | None = None

    def _start(self) -> None:
        self._stop = threading.Event()
        self._slots = threading.Semaphore(self._capacity)
        self._queue: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._produce, name="stratagem-prefetch", daemon=True)
        self._thread.start()
        self._at_exit = EventThread(self._stop, self._thread)  # held here: registered while this iterator lives
        stop_at_exit(self._at_exit)

    def _produce(self) -> None:
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.1):
                continue
            try:
                element = next(self._parent)
                self._queue.put(("ok", element, self._parent.get_state()))
            except StopIteration:
                self._queue.put(("end", None, None))
                return
            except BaseException as err:  # delivered to the consumer, who re-raises it
                self._queue.put(("error", err, None))
                return

    def __next__(self) -> Any:
        if self._inline:
            return self._next_inline()
        if self._thread is None:
            self._start()
        if self._autotune and self._queue.empty():
            self._grow()
        status, payload, state = self._queue.get()
        if status == "end":
            self._queue.put((status, payload, state))  # stay exhausted on later calls
            raise StopIteration
        if status == "error":
            raise payload
        self._slots.release()
        self._state = state
        if self._autotune:
            self._last_bytes = nbytes(payload)
        return payload

    def _next_inline(self) -> Any:
        now = time.perf_counter()
        if self._returned_at is not None:
            self._consume_min = min(self._consume_min, now - self._returned_at)
        element = next(self._parent)  # StopIteration and errors reach the consumer as they are
        self._state = self._parent.get_state()
        self._returned_at = time.perf_counter()
        self._produce_s += self._returned_at - now
        self._inline_count += 1
        if self._inline_count % _INLINE_WINDOW == 0:
            # Look-ahead pays once the consumer's own work is a fair share of the producing and more than a
            # hand-off between threads costs (a consumer that only reads shapes, over batches sliced from a
            # cache's chunk, would otherwise qualify and then wait on every hand-off).
            # The consumer's least gap of the window counts, so that one pause (a garbage collection) does not
            # start a thread for good.
            gap = self._consume_min
            if gap * _INLINE_WINDOW >= _OVERLAP_WORTH * self._produce_s and gap >= _MIN_CONSUME_S:
                self._inline = False
            self._produce_s = 0.0
            self._consume_min = float("inf")
        return element

    def _grow(self) -> None:
        # The consumer is about to wait: one more slot of look-ahead, within the memory budget.
        limit = _MAX_AUTOTUNE_BUFFER
        if self._last_bytes:
            limit = min(limit, max(2, self._ram_budget // self._last_bytes))
        if self._capacity < limit:
            self._capacity += 1
            self._slots.release()

    def get_state(self) -> dict[str, Any]:
        return {self._PARENT: self._state}

    def set_state(self, state: dict[str, Any]) -> None:
        self._stop_thread()  # its look-ahead belongs to the old position
        self._parent.set_state(state[self._PARENT])
        self._state = state[self._PARENT]

    def _stop_thread(self) -> None:
        thread, self._thread = getattr(self, "_thread", None), None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=_JOIN_S)

    def close(self) -> None:
        self._stop_thread()
        super().close()
