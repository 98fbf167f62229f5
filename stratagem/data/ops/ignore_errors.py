"""``IgnoreErrorsDataset``: drops the elements whose production raises (``Dataset.ignore_errors``)."""

from __future__ import annotations

import logging
from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IndexIterator, IterContext, ParentPositionIterator

logger = logging.getLogger(__name__)


class IgnoreErrorsDataset(Dataset):
    """The parent's elements, skipping any whose production raised an ``Exception``.

    Streaming. Over a streaming parent the element being made is lost (a generator that raised has ended, as TF's).

    Args:
        parent: The input dataset.
        log_warning: Log each ignored error as a warning.

    Example:
        >>> ds = Dataset.from_tensor_slices([1.0, 0.0, 2.0]).map(lambda x: 1 / x if x else 1 // 0)
        >>> [float(x) for x in ds.ignore_errors()]
        [1.0, 0.5]
    """

    def __init__(self, parent: Dataset, log_warning: bool = False) -> None:
        super().__init__(parent)
        self._log_warning = bool(log_warning)

    def ignored(self, err: Exception) -> None:
        if self._log_warning:
            logger.warning("ignore_errors: an element was dropped: %s: %s", type(err).__name__, err)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._parents[0]._length() is not None:
            return _IndexSkippingIterator(self, ctx)
        return _ErrorSkippingIterator(self, self._parents[0]._make_iterator(ctx))

    def __str__(self) -> str:
        return f"IgnoreErrorsDataset(log_warning={self._log_warning}) <- {self._parents[0]}"


class _IndexSkippingIterator(IndexIterator):
    """Reads the parent by position, moving past a position whose element raised."""

    def __init__(self, dataset: IgnoreErrorsDataset, ctx: IterContext) -> None:
        super().__init__(dataset._parents[0], ctx)
        self._owner = dataset

    def __next__(self) -> Any:
        while self._length is None or self._length < 0 or self._index < self._length:
            index, self._index = self._index, self._index + 1
            try:
                return self._dataset._get(index, self._ctx)
            except Exception as err:  # noqa: BLE001 (the op's purpose)
                self._owner.ignored(err)
        raise StopIteration


class _ErrorSkippingIterator(ParentPositionIterator):
    def __init__(self, dataset: IgnoreErrorsDataset, parent: DatasetIterator) -> None:
        self._dataset, self._parent = dataset, parent

    def __next__(self) -> Any:
        while True:
            try:
                return next(self._parent)
            except StopIteration:
                raise
            except Exception as err:  # noqa: BLE001 (the op's purpose)
                self._dataset.ignored(err)
