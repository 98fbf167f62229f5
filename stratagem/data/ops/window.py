"""``WindowDataset``: windows of ``size`` elements, each a dataset (``Dataset.window``).

Window ``i`` holds elements ``i*shift + j*stride`` for ``j < size``, as a dataset per component (a tuple element gives
a tuple of datasets), as in tf.data.
"""

from __future__ import annotations

import collections
from typing import Any

from stratagem.data._replay import ReplayIterator
from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.options import INFINITE_CARDINALITY


class ElementListDataset(Dataset):
    """Random-access over a list of elements (a window); elements may differ in shape, as sequences do."""

    def __init__(self, elements: list[Any]) -> None:
        super().__init__()
        self._elements = elements

    def _length(self) -> int:
        return len(self._elements)

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._elements[index]

    def __str__(self) -> str:
        return f"ElementListDataset({len(self._elements)} elements)"


def window_of(rows: list[Any]) -> Any:
    """The window element for ``rows``: a dataset per component, in the elements' structure."""
    first = rows[0]
    if isinstance(first, dict):
        return {key: window_of([row[key] for row in rows]) for key in first}
    if isinstance(first, tuple):
        return tuple(window_of([row[i] for row in rows]) for i in range(len(first)))
    return ElementListDataset(rows)


class WindowDataset(Dataset):
    """See ``Dataset.window``.

    Args:
        parent: The input dataset.
        size: Elements per window.
        shift: Input elements from one window's start to the next (default ``size``).
        stride: Input elements between two elements of one window.
        drop_remainder: Drop the last windows if shorter than ``size``.

    Example:
        >>> ds = Dataset.range(7).window(3, shift=2, drop_remainder=True).flat_map(lambda w: w.batch(3))
        >>> [x.tolist() for x in ds]
        [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    """

    def __init__(self, parent: Dataset, size: int, shift: int | None = None, stride: int = 1,
                 drop_remainder: bool = False) -> None:
        super().__init__(parent)
        shift = size if shift is None else shift
        for name, value in (("size", size), ("shift", shift), ("stride", stride)):
            _check_positive(name, value)
        self.size, self.shift, self.stride, self.drop_remainder = int(size), int(shift), int(stride), bool(drop_remainder)

    def _length(self) -> int | None:
        n = self._parents[0]._length()
        if n is None or n == INFINITE_CARDINALITY:
            return n
        if self.drop_remainder:  # the last full window starts at most (size - 1) * stride before the end
            last = n - 1 - (self.size - 1) * self.stride
            return last // self.shift + 1 if last >= 0 else 0
        return -(-n // self.shift)

    def _get(self, index: int, ctx: IterContext) -> Any:
        n = self._parents[0]._length()
        start = index * self.shift
        indices = [start + j * self.stride for j in range(self.size)]
        if n is not None and n != INFINITE_CARDINALITY:
            indices = [i for i in indices if i < n]
        return window_of([self._parents[0]._get(i, ctx) for i in indices])

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _StreamingWindowIterator(self, self._parents[0]._make_iterator(ctx))

    def __str__(self) -> str:
        return (f"WindowDataset(size={self.size}, shift={self.shift}, stride={self.stride}, "
                f"drop_remainder={self.drop_remainder}) <- {self._parents[0]}")


class _StreamingWindowIterator(ReplayIterator):
    def __init__(self, dataset: WindowDataset, parent: DatasetIterator) -> None:
        self._dataset = dataset
        super().__init__(parent)

    def _reset(self) -> None:
        self._buffer: collections.deque[Any] = collections.deque()  # from the current window's start
        self._to_skip = 0  # input elements still to drop before the next window starts (shift > span)
        self._exhausted = False

    def _pull(self) -> bool:
        try:
            self._buffer.append(next(self._parent))
        except StopIteration:
            self._exhausted = True
        return not self._exhausted

    def _produce(self) -> Any:
        d = self._dataset
        while self._to_skip and not self._exhausted:
            if self._pull():
                self._buffer.popleft()
                self._to_skip -= 1
        span = (d.size - 1) * d.stride + 1
        while len(self._buffer) < span and not self._exhausted:
            self._pull()
        rows = list(self._buffer)[::d.stride][:d.size]
        if not rows or (d.drop_remainder and len(rows) < d.size):
            raise StopIteration
        dropped = min(d.shift, len(self._buffer))
        for _ in range(dropped):
            self._buffer.popleft()
        self._to_skip = d.shift - dropped
        return window_of(rows)
