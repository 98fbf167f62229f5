"""``TakeDataset`` and ``SkipDataset``: a prefix, or everything after it."""

from __future__ import annotations

from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext, Pending
from stratagem.data.options import INFINITE_CARDINALITY


def _check_count(name: str, count: int) -> int:
    count = int(count)
    if count < -1:
        raise ValueError(f"{name} count must be -1 (all) or non-negative. Received: count={count}")
    return count


class TakeDataset(Dataset):
    """The first ``count`` elements (all if -1)."""

    def __init__(self, parent: Dataset, count: int) -> None:
        super().__init__(parent)
        self.count = _check_count("take", count)

    def _length(self) -> int | None:
        n = self._parents[0]._length()
        if n is None or self.count == -1:
            return n
        return self.count if n == INFINITE_CARDINALITY else min(n, self.count)

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._parents[0]._get(index, ctx)

    def _get_many(self, indices: Any, ctx: IterContext) -> Any:
        return self._parents[0]._get_many(indices, ctx)

    def _submit_many(self, indices: Any, ctx: IterContext) -> Pending:
        return self._parents[0]._submit_many(indices, ctx)

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is not None:
            return super()._make_iterator(ctx)
        return _StreamingTakeIterator(self._parents[0]._make_iterator(ctx), self.count)

    def __str__(self) -> str:
        return f"TakeDataset({self.count}) <- {self._parents[0]}"


class SkipDataset(Dataset):
    """All but the first ``count`` elements (nothing if -1)."""

    def __init__(self, parent: Dataset, count: int) -> None:
        super().__init__(parent)
        self.count = _check_count("skip", count)

    def _length(self) -> int | None:
        n = self._parents[0]._length()
        if n is None:
            return n
        if self.count == -1:
            return 0  # skip everything (tf.data would loop forever over an endless input)
        return n if n == INFINITE_CARDINALITY else max(n - self.count, 0)

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._parents[0]._get(index + self.count, ctx)

    def _get_many(self, indices: Any, ctx: IterContext) -> Any:
        return self._parents[0]._get_many([i + self.count for i in indices], ctx)

    def _submit_many(self, indices: Any, ctx: IterContext) -> Pending:
        return self._parents[0]._submit_many([i + self.count for i in indices], ctx)

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is not None:
            return super()._make_iterator(ctx)
        return _StreamingSkipIterator(self._parents[0]._make_iterator(ctx), self.count)

    def __str__(self) -> str:
        return f"SkipDataset({self.count}) <- {self._parents[0]}"


class _StreamingTakeIterator(DatasetIterator):
    _TAKEN = "taken"
    _PARENT = "parent"

    def __init__(self, parent: DatasetIterator, count: int) -> None:
        self._parent, self._count, self._taken = parent, count, 0

    def __next__(self) -> Any:
        if self._count != -1 and self._taken >= self._count:
            raise StopIteration
        element = next(self._parent)
        self._taken += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return {self._TAKEN: self._taken, self._PARENT: self._parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._taken = int(state[self._TAKEN])
        self._parent.set_state(state[self._PARENT])

    def close(self) -> None:
        self._parent.close()


class _StreamingSkipIterator(DatasetIterator):
    _SKIPPED = "skipped"
    _PARENT = "parent"

    def __init__(self, parent: DatasetIterator, count: int) -> None:
        self._parent, self._count, self._skipped = parent, count, False

    def __next__(self) -> Any:
        if not self._skipped:
            self._skipped = True
            if self._count == -1:
                raise StopIteration
            for _ in range(self._count):
                next(self._parent)
        if self._count == -1:
            raise StopIteration
        return next(self._parent)

    def get_state(self) -> dict[str, Any]:
        return {self._SKIPPED: self._skipped, self._PARENT: self._parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._skipped = bool(state[self._SKIPPED])
        self._parent.set_state(state[self._PARENT])

    def close(self) -> None:
        self._parent.close()
