"""``BatchDataset``: consecutive elements stacked along a new axis 0.

Over a random-access parent, batch ``i`` is fetched with one ``_get_many``
call, so sources gather rows with one fancy index and vectorised maps run
once per batch. ``BatchingDataset`` holds what ``batch`` and
``padded_batch`` share: the batch arithmetic and the streaming iterator.
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Sequence
from typing import Any

import numpy as np

from stratagem.data._structure import stack
from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IndexIterator, IterContext, Pending, ParentPositionIterator
from stratagem.data.options import INFINITE_CARDINALITY


class BatchingDataset(Dataset):
    """Base of the ops that combine ``batch_size`` consecutive elements into one (``combine``)."""

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

    @abc.abstractmethod
    def combine(self, elements: Sequence[Any]) -> Any:
        """One batch of ``elements``."""

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _StreamingBatchIterator(self._parents[0]._make_iterator(ctx), self)


class BatchDataset(BatchingDataset):
    """See ``Dataset.batch``."""

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._parents[0]._get_many(self.rows(index), ctx)

    def combine(self, elements: Sequence[Any]) -> Any:
        return stack(elements)

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        return BatchIterator(self, ctx) if self._length() is not None else super()._make_iterator(ctx)

    def __str__(self) -> str:
        return f"BatchDataset({self.batch_size}, drop_remainder={self.drop_remainder}) <- {self._parents[0]}"


class BatchIterator(IndexIterator):
    """Random-access batches, the next ``AHEAD`` already submitted (a parallel map below works on them).

    The state is still the index of the next batch handed out; batches started
    ahead are dropped on ``set_state`` and ``close``. ``_submit`` picks the
    rows of a batch (a distributed dataset submits only its replica's).
    """

    AHEAD = 2

    def __init__(self, dataset: BatchDataset, ctx: IterContext) -> None:
        super().__init__(dataset, ctx)
        self._pending: collections.deque[Pending] = collections.deque()
        self._announced = False

    def _submit(self, index: int) -> Pending:
        dataset: BatchDataset = self._dataset  # type: ignore[assignment]
        if not self._announced:  # the rest of the pass, in order: a filling cache below computes along it
            self._announced = True
            n = dataset._parents[0]._length()
            if n is not None and n >= 0:
                dataset._parents[0]._expect_order(np.arange(dataset.rows(index).start, n, dtype=np.int64), self._ctx)
        return dataset._parents[0]._submit_many(dataset.rows(index), self._ctx)

    def __next__(self) -> Any:
        while len(self._pending) <= self.AHEAD:
            index = self._index + len(self._pending)
            if self._length is not None and self._length >= 0 and index >= self._length:
                break
            self._pending.append(self._submit(index))
        if not self._pending:
            raise StopIteration
        batch = self._pending.popleft().result()
        self._index += 1
        return batch

    def set_state(self, state: dict[str, Any]) -> None:
        self.close()
        super().set_state(state)
        self._announced = False

    def close(self) -> None:
        while self._pending:
            self._pending.popleft().cancel()


class _StreamingBatchIterator(ParentPositionIterator):
    def __init__(self, parent: DatasetIterator, dataset: BatchingDataset) -> None:
        self._parent, self._dataset = parent, dataset

    def __next__(self) -> Any:
        elements = []
        for _ in range(self._dataset.batch_size):
            try:
                elements.append(next(self._parent))
            except StopIteration:
                break
        if not elements or (self._dataset.drop_remainder and len(elements) < self._dataset.batch_size):
            raise StopIteration
        return self._dataset.combine(elements)
