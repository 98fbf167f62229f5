"""``ReplayIterator``: a streaming iterator whose next element depends on all before it.

``scan``'s state, ``group_by_window``'s windows and ``window``'s buffer hold tensors, which never go in a state: the
state is the parent's position at the epoch's start plus the elements produced, and restoring replays (O(position)).
"""

from __future__ import annotations

import abc
from typing import Any

from stratagem.data.iterator import DatasetIterator


class ReplayIterator(DatasetIterator):
    """Subclasses implement ``_reset`` (forget what was accumulated) and ``_produce`` (the next element)."""

    _START = "parent_at_start"
    _COUNT = "num_produced"

    def __init__(self, parent: DatasetIterator) -> None:
        self._parent = parent
        self._start_state = parent.get_state()
        self._count = 0
        self._reset()

    @abc.abstractmethod
    def _reset(self) -> None:
        """Clears everything accumulated since the epoch began."""

    @abc.abstractmethod
    def _produce(self) -> Any:
        """The next element (reading ``self._parent``), or ``StopIteration``."""

    def __next__(self) -> Any:
        element = self._produce()
        self._count += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return {self._START: self._start_state, self._COUNT: self._count}

    def set_state(self, state: dict[str, Any]) -> None:
        self._start_state = state[self._START]
        self._parent.set_state(self._start_state)
        self._reset()
        self._count = 0
        for _ in range(int(state[self._COUNT])):
            next(self)

    def close(self) -> None:
        self._parent.close()
