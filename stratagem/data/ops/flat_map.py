"""``FlatMapDataset``: maps each element to a dataset and yields their elements one dataset after another."""

from __future__ import annotations

from collections.abc import Callable

from stratagem.data.dataset import Dataset
from stratagem.data.ops.interleave import InterleaveDataset


class FlatMapDataset(InterleaveDataset):
    """See ``Dataset.flat_map``: an interleave with one open input, as tf.data defines it.

    Example:
        >>> ds = Dataset.range(1, 4).flat_map(lambda x: Dataset.from_tensors(x).repeat(x))
        >>> [int(x) for x in ds]
        [1, 2, 2, 3, 3, 3]
    """

    _OP = "flat_map"

    def __init__(self, parent: Dataset, map_func: Callable[..., Dataset]) -> None:
        super().__init__(parent, map_func, cycle_length=1, block_length=1, num_parallel_calls=None, deterministic=None)

    def __str__(self) -> str:
        return f"FlatMapDataset({getattr(self._map_func, '__name__', 'fn')}) <- {self._parents[0]}"
