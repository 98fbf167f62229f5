"""``CounterDataset``: the endless int64 count ``start, start + step, ...`` (``tf.data.experimental.Counter``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import IterContext
from stratagem.data.options import INFINITE_CARDINALITY


class CounterDataset(Dataset):
    """int64 scalars ``start + i * step`` for ever; random-access, cardinality ``INFINITE_CARDINALITY``."""

    def __init__(self, start: int = 0, step: int = 1) -> None:
        super().__init__()
        self._start, self._step = int(start), int(step)

    def _length(self) -> int:
        return INFINITE_CARDINALITY

    def _get(self, index: int, ctx: IterContext) -> Any:
        return np.int64(self._start + index * self._step)

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        return np.asarray(indices, dtype=np.int64) * self._step + self._start

    def __str__(self) -> str:
        return f"CounterDataset({self._start}, {self._step})"
