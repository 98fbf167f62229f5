"""``ShardDataset``: every ``num_shards``-th element starting at ``index``."""

from __future__ import annotations

from typing import Any

from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext, Pending
from stratagem.data.options import INFINITE_CARDINALITY


class ShardDataset(Dataset):
    """See ``Dataset.shard``."""

    def __init__(self, parent: Dataset, num_shards: int, index: int) -> None:
        super().__init__(parent)
        _check_positive("num_shards", num_shards)
        if not 0 <= index < num_shards:
            raise ValueError(f"index must be in [0, num_shards={num_shards}). Received: index={index}")
        self.num_shards, self.index = int(num_shards), int(index)

    def _length(self) -> int | None:
        n = self._parents[0]._length()
        if n is None or n == INFINITE_CARDINALITY:
            return n
        return max(0, -(-(n - self.index) // self.num_shards))

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._parents[0]._get(index * self.num_shards + self.index, ctx)

    def _get_many(self, indices: Any, ctx: IterContext) -> Any:
        return self._parents[0]._get_many([i * self.num_shards + self.index for i in indices], ctx)

    def _submit_many(self, indices: Any, ctx: IterContext) -> Pending:
        return self._parents[0]._submit_many([i * self.num_shards + self.index for i in indices], ctx)

    def _reads_files(self) -> bool:
        return self._parents[0]._reads_files()

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is not None:
            return super()._make_iterator(ctx)
        return _StreamingShardIterator(self._parents[0]._make_iterator(ctx), self.num_shards, self.index)

    def __str__(self) -> str:
        return f"ShardDataset({self.num_shards}, {self.index}) <- {self._parents[0]}"


class _StreamingShardIterator(DatasetIterator):
    _POSITION = "position"
    _PARENT = "parent"

    def __init__(self, parent: DatasetIterator, num_shards: int, index: int) -> None:
        self._parent, self._num, self._index, self._position = parent, num_shards, index, 0

    def __next__(self) -> Any:
        while True:
            element = next(self._parent)
            position, self._position = self._position, self._position + 1
            if position % self._num == self._index:
                return element

    def get_state(self) -> dict[str, Any]:
        return {self._POSITION: self._position, self._PARENT: self._parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._position = int(state[self._POSITION])
        self._parent.set_state(state[self._PARENT])

    def close(self) -> None:
        self._parent.close()
