"""``MixIterator``: the iterator base of ops that pick each element from one of several inputs.

It keeps one iterator per input and which have ended, checks each input's first element's structure and dtypes (as
tf.data checks specs), and nests the inputs' states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratagem.data._element_types import check_compatible, element_types
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext


def check_datasets(op: str, datasets: Any) -> list[Dataset]:
    """``datasets`` as a non-empty list of Datasets, or a ``TypeError`` naming what was received."""
    if isinstance(datasets, Dataset) or not isinstance(datasets, Sequence) or not datasets \
            or not all(isinstance(d, Dataset) for d in datasets):
        raise TypeError(f"{op} takes a non-empty list of Datasets. Received: datasets={datasets!r}")
    return list(datasets)


class MixIterator(DatasetIterator):
    """Subclasses say which input gives the next element (``_pick``); an ended input stops all if ``stop_on_empty``."""

    _PARENTS = "parents"
    _ALIVE = "alive"
    _EXHAUSTED = object()

    def __init__(self, op: str, datasets: Sequence[Dataset], ctx: IterContext, stop_on_empty: bool) -> None:
        self._op, self._stop_on_empty = op, stop_on_empty
        self._inputs = [d._make_iterator(ctx) for d in datasets]
        self._alive = [True] * len(self._inputs)
        self._types: Any = None  # of the first element read, from input self._typed_by
        self._typed_by = 0
        self._checked = [False] * len(self._inputs)

    def __next__(self) -> Any:
        while True:
            if self._stop_on_empty and not all(self._alive):
                raise StopIteration
            element = self._next_from(self._pick())
            if element is not self._EXHAUSTED:
                return element

    def _pick(self) -> int:
        raise NotImplementedError

    def _next_from(self, which: int) -> Any:
        try:
            element = next(self._inputs[which])
        except StopIteration:
            self._alive[which] = False
            return self._EXHAUSTED
        if not self._checked[which]:
            types = element_types(element)
            if self._types is None:
                self._types, self._typed_by = types, which
            check_compatible(self._op, self._types, types, names=(f"datasets[{self._typed_by}]", f"datasets[{which}]"))
            self._checked[which] = True
        return element

    def get_state(self) -> dict[str, Any]:
        return {self._PARENTS: [i.get_state() for i in self._inputs], self._ALIVE: [int(a) for a in self._alive]}

    def set_state(self, state: dict[str, Any]) -> None:
        for iterator, sub in zip(self._inputs, state[self._PARENTS]):
            iterator.set_state(sub)
        self._alive = [bool(a) for a in state[self._ALIVE]]

    def close(self) -> None:
        for iterator in self._inputs:
            iterator.close()
