"""Nodes that hand their parent's elements through unchanged: ``ForwardingDataset``, ``OptionsDataset``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext, Pending
from stratagem.data.options import Options


class ForwardingDataset(Dataset):
    """Base of nodes whose elements are exactly the parent's (options, prefetch).

    Random access is forwarded, so such a node keeps a pipeline random-access,
    and distribution looks through it to the batch below.
    """

    def _length(self) -> int | None:
        return self._parents[0]._length()

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._parents[0]._get(index, ctx)

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        return self._parents[0]._get_many(indices, ctx)

    def _submit_many(self, indices: Sequence[int], ctx: IterContext) -> Pending:
        return self._parents[0]._submit_many(indices, ctx)

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        return self._parents[0]._make_iterator(ctx)


class OptionsDataset(ForwardingDataset):
    """Passes its parent through unchanged; only ``options()`` differs."""

    def __init__(self, parent: Dataset, options: Options) -> None:
        super().__init__(parent)
        self._options = options
