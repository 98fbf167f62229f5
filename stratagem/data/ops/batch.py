"""``BatchDataset``: consecutive elements stacked along a new axis 0.

Over a random-access parent, batch ``i`` is fetched with one ``_get_many``
call, so sources gather rows with one fancy index and vectorised maps run
once per batch.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from stratagem.data._structure import stack
from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IndexIterator, IterContext, Pending, ParentPositionIterator
from stratagem.data.options import INFINITE_CARDINALITY


class BatchDataset(Dataset):
    """See ``Dataset.batch``."""

    def __init__(self, parent: Dataset, batch_size: int, *, drop_remainder: bool) -> None:
        super().__init__(parent)
        _check_positive("batch_size", batch_size)
        self.batch_size, self.drop_remainder = int(batch_size), drop_remainder

    def _length(self) -> int | None:
        n = self._parents[0]._length()
        if n is None or n == INFINITE_CARDINALITY:
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def rows(self, index: int) -> range:
        """Parent positions that make up batch ``index``."""
        n = self._parents[0]._length()
        stop = (index + 1) * self.batch_size
        if n is not None and n != INFINITE_CARDINALITY:
            stop = min(stop, n)
        return range(index * self.batch_size, stop)

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._parents[0]._get_many(self.rows(index), ctx)

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        return stack([self._get(i, ctx) for i in indices])

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is not None:
            return LookaheadBatchIterator(self, ctx)
        return _StreamingBatchIterator(self._parents[0]._make_iterator(ctx), self.batch_size, self.drop_remainder)

    def __str__(self) -> str:
        return f"BatchDataset({self.batch_size}, drop_remainder={self.drop_remainder}) <- {self._parents[0]}"


class LookaheadBatchIterator(IndexIterator):
    """Random-access batches, the next ``ahead`` already submitted (a parallel map below works on them).

    The state is still the index of the next batch handed out; batches started
    ahead are dropped on ``set_state`` and ``close``.
    """

    def __init__(self, dataset: BatchDataset, ctx: IterContext, ahead: int = 2) -> None:
        super().__init__(dataset, ctx)
        self._ahead = ahead
        self._pending: collections.deque[Pending] = collections.deque()

    def __next__(self) -> Any:
        dataset: BatchDataset = self._dataset  # type: ignore[assignment]
        parent = dataset._parents[0]
        while len(self._pending) <= self._ahead:
            index = self._index + len(self._pending)
            if self._length is not None and self._length >= 0 and index >= self._length:
                break
            self._pending.append(parent._submit_many(dataset.rows(index), self._ctx))
        if not self._pending:
            raise StopIteration
        batch = self._pending.popleft().result()
        self._index += 1
        return batch

    def set_state(self, state: dict[str, Any]) -> None:
        self._drop_pending()
        super().set_state(state)

    def _drop_pending(self) -> None:
        while self._pending:
            self._pending.popleft().cancel()

    def close(self) -> None:
        self._drop_pending()


class _StreamingBatchIterator(ParentPositionIterator):
    def __init__(self, parent: DatasetIterator, batch_size: int, drop_remainder: bool) -> None:
        self._parent, self._batch_size, self._drop = parent, batch_size, drop_remainder

    def __next__(self) -> Any:
        elements = []
        for _ in range(self._batch_size):
            try:
                elements.append(next(self._parent))
            except StopIteration:
                break
        if not elements or (self._drop and len(elements) < self._batch_size):
            raise StopIteration
        return stack(elements)
