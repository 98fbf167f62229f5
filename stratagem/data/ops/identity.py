"""Nodes whose elements are their parent's: ``IndexMapDataset``, ``ForwardingDataset``, ``OptionsDataset``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext, Pending
from stratagem.data.options import Options


class IndexMapDataset(Dataset):
    """Base of random-access nodes whose element ``i`` is a parent element (take, skip, shard): ``_parent_indices``."""

    def _parent_indices(self, indices: Sequence[int], ctx: IterContext) -> Sequence[int]:
        return indices

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._parents[0]._get(self._parent_indices([index], ctx)[0], ctx)

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        return self._parents[0]._get_many(self._parent_indices(indices, ctx), ctx)

    def _submit_many(self, indices: Sequence[int], ctx: IterContext) -> Pending:
        return self._parents[0]._submit_many(self._parent_indices(indices, ctx), ctx)

    def _expect_order(self, order: np.ndarray, ctx: IterContext) -> None:
        self._parents[0]._expect_order(np.asarray(self._parent_indices(order.tolist(), ctx), dtype=np.int64), ctx)


class ForwardingDataset(IndexMapDataset):
    """Base of nodes whose elements are the parent's (options, prefetch); random access and distribution see through."""

    def _length(self) -> int | None:
        return self._parents[0]._length()

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        return self._parents[0]._make_iterator(ctx)


class OptionsDataset(ForwardingDataset):
    """Passes its parent through unchanged; only ``options()`` differs."""

    def __init__(self, parent: Dataset, options: Options) -> None:
        super().__init__(parent)
        if not isinstance(options, Options):
            raise TypeError(f"with_options takes a stratagem.data.Options. Received: options of type {type(options).__name__}")
        self._options = parent._options.merge(options)  # a copy: later changes to ``options`` do not leak in
