"""``ConcatenateDataset``: one dataset's elements, then another's."""

from __future__ import annotations

from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.options import INFINITE_CARDINALITY


class ConcatenateDataset(Dataset):
    """See ``Dataset.concatenate``."""

    def __init__(self, first: Dataset, second: Dataset) -> None:
        super().__init__(first, second)

    def _length(self) -> int | None:
        a, b = self._parents[0]._length(), self._parents[1]._length()
        if a is None or b is None:
            return None
        return INFINITE_CARDINALITY if INFINITE_CARDINALITY in (a, b) else a + b

    def _get(self, index: int, ctx: IterContext) -> Any:
        first = self._parents[0]._length()
        assert first is not None
        if first == INFINITE_CARDINALITY or index < first:
            return self._parents[0]._get(index, ctx)
        return self._parents[1]._get(index - first, ctx)

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is not None:
            return super()._make_iterator(ctx)
        return _StreamingConcatenateIterator(self, ctx)

    def __str__(self) -> str:
        return f"ConcatenateDataset({self._parents[0]}, {self._parents[1]})"


class _StreamingConcatenateIterator(DatasetIterator):
    _WHICH = "which"
    _PARENT = "parent"
    _SEED = "seed"
    _EPOCH = "epoch"

    def __init__(self, dataset: ConcatenateDataset, ctx: IterContext) -> None:
        self._datasets, self._ctx = dataset._parents, ctx
        self._which = 0
        self._current = self._datasets[0]._make_iterator(ctx)

    def __next__(self) -> Any:
        while True:
            try:
                return next(self._current)
            except StopIteration:
                if self._which == 1:
                    raise
                self._switch(1)

    def _switch(self, which: int) -> None:
        self._current.close()
        self._which = which
        self._current = self._datasets[which]._make_iterator(self._ctx)

    def get_state(self) -> dict[str, Any]:
        return {self._WHICH: self._which, self._SEED: self._ctx.seed, self._EPOCH: self._ctx.epoch,
                self._PARENT: self._current.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        # The seed and epoch travel in the state: the second input's iterator is built from them.
        self._ctx = IterContext(seed=int(state[self._SEED]), epoch=int(state[self._EPOCH]))
        self._switch(int(state[self._WHICH]))
        self._current.set_state(state[self._PARENT])

    def close(self) -> None:
        self._current.close()
