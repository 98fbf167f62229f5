"""``UnbatchDataset``: each element split along axis 0 into its rows.

Streaming. The state is the parent's state before the current element plus the row offset (one element replayed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stratagem.data._structure import leaves, take_rows
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext, ParentPositionIterator


class UnbatchDataset(Dataset):
    """Splits each element into its rows; see ``Dataset.unbatch``.

    Every component of an element must have the same size along axis 0.

    Args:
        parent: A dataset whose elements have at least one axis.

    Raises:
        ValueError: While iterating, if components disagree on their size along axis 0, or one is a scalar.

    Example:
        >>> ds = Dataset.from_tensors(np.arange(6).reshape(3, 2)).unbatch()
        >>> [x.tolist() for x in ds]
        [[0, 1], [2, 3], [4, 5]]
    """

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _UnbatchIterator(self._parents[0]._make_iterator(ctx))


class _UnbatchIterator(ParentPositionIterator):
    _OFFSET = "offset"

    def __init__(self, parent: DatasetIterator) -> None:
        self._parent = parent
        self._batch: Any = None
        self._num_rows = 0
        self._offset = 0
        self._batch_state: dict[str, Any] = {}  # parent state before self._batch was pulled

    def __next__(self) -> Any:
        while self._batch is None or self._offset >= self._num_rows:
            self._pull()
        row = take_rows(self._batch, self._offset)
        self._offset += 1
        return row

    def _pull(self) -> None:
        self._batch_state = self._parent.get_state()
        self._batch = None  # a StopIteration below leaves nothing half-consumed
        batch = next(self._parent)
        self._batch, self._num_rows, self._offset = batch, rows_of(batch), 0

    def get_state(self) -> dict[str, Any]:
        if self._batch is None or self._offset >= self._num_rows:
            return {self._PARENT: self._parent.get_state(), self._OFFSET: 0}
        return {self._PARENT: self._batch_state, self._OFFSET: self._offset}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state[self._PARENT])
        self._batch, self._num_rows, self._offset = None, 0, 0
        offset = int(state[self._OFFSET])
        if offset > 0:  # replay: pull the element the saved position was inside, then skip its returned rows
            self._pull()
            self._offset = offset


def rows_of(element: Any) -> int:
    """Size of axis 0, shared by every component of ``element`` (ValueError for a scalar or a mismatch)."""
    sizes = []
    for leaf in leaves(element):
        shape = np.shape(leaf)
        if not shape:
            raise ValueError("unbatch needs every component to have at least one axis to split. Received: a scalar "
                             f"component in an element with shapes {[tuple(np.shape(x)) for x in leaves(element)]}")
        sizes.append(int(shape[0]))
    for size in sizes[1:]:
        if size != sizes[0]:
            raise ValueError("unbatch needs every component of an element to have the same size along axis 0. "
                             f"Received: component sizes {sizes[0]} and {size} (all sizes: {sizes})")
    return sizes[0] if sizes else 0
