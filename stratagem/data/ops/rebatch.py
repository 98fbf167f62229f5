"""``RebatchDataset``: the input's batches split and regrouped into batches of new sizes (``Dataset.rebatch``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratagem.data._structure import stack
from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops.unbatch import UnbatchDataset


class RebatchDataset(Dataset):
    """See ``Dataset.rebatch``: the rows of the input's batches, in order, in batches of ``batch_size``.

    Args:
        parent: A dataset of batches.
        batch_size: Rows per output batch, or a list of them used in turn.
        drop_remainder: Drop a last batch shorter than its size.

    Example:
        >>> ds = Dataset.range(8).batch(4).rebatch([3, 1])
        >>> [x.tolist() for x in ds]
        [[0, 1, 2], [3], [4, 5, 6], [7]]
    """

    def __init__(self, parent: Dataset, batch_size: int | Sequence[int], drop_remainder: bool = False) -> None:
        super().__init__(parent)
        sizes = [batch_size] if not isinstance(batch_size, Sequence) else list(batch_size)
        if not sizes:
            raise ValueError("rebatch needs at least one batch size. Received: batch_size=[]")
        for size in sizes:
            _check_positive("batch_size", size)
        self._sizes, self._drop_remainder = [int(s) for s in sizes], bool(drop_remainder)
        self._rows = UnbatchDataset(parent)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _RebatchIterator(self, self._rows._make_iterator(ctx))

    def __str__(self) -> str:
        return f"RebatchDataset({self._sizes}, drop_remainder={self._drop_remainder}) <- {self._parents[0]}"


class _RebatchIterator(DatasetIterator):
    """Takes exactly one batch's rows per element, so the rows' position between batches is the whole state."""

    _COUNT = "num_batches"

    def __init__(self, dataset: RebatchDataset, rows: DatasetIterator) -> None:
        self._dataset, self._rows, self._batches = dataset, rows, 0

    def __next__(self) -> Any:
        sizes = self._dataset._sizes
        size = sizes[self._batches % len(sizes)]
        rows: list[Any] = []
        for _ in range(size):
            try:
                rows.append(next(self._rows))
            except StopIteration:
                break
        if not rows or (self._dataset._drop_remainder and len(rows) < size):
            raise StopIteration
        self._batches += 1
        return stack(rows)

    def get_state(self) -> dict[str, Any]:
        return {self._PARENT: self._rows.get_state(), self._COUNT: self._batches}

    def set_state(self, state: dict[str, Any]) -> None:
        self._rows.set_state(state[self._PARENT])
        self._batches = int(state[self._COUNT])

    def close(self) -> None:
        self._rows.close()
