"""Variable partitioners with ``tf.distribute.experimental.partitioners``' meaning.

A partitioner is called with a variable's shape and dtype and returns how many parts each axis is cut into; as in
TensorFlow only axis 0 is cut, so the result is ``[num_shards, 1, 1, ...]``. ``shard_rows`` then says which rows
each shard holds: contiguous, as equal as possible, the first shards one row longer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from stratagem.distribute.input_context import replica_slice

# What ParameterServerStrategy(variable_partitioner=...) takes: (shape, dtype) -> parts per axis.
Partitioner = Callable[[Sequence[int], torch.dtype], list[int]]


def _row_bytes(shape: Sequence[int], dtype: torch.dtype, bytes_per_string: int) -> int:
    element = bytes_per_string if dtype is None else torch.empty((), dtype=dtype).element_size()
    return max(1, element * math.prod(shape[1:]))


class FixedShardsPartitioner:
    """Cuts axis 0 into ``num_shards`` parts (fewer if there are fewer rows).

    Example:
        >>> FixedShardsPartitioner(2)((10, 4), torch.float32)
        [2, 1]
    """

    def __init__(self, num_shards: int) -> None:
        if num_shards < 1:
            raise ValueError(f"num_shards must be at least 1. Received: num_shards={num_shards}")
        self.num_shards = num_shards

    def __call__(self, shape: Sequence[int], dtype: torch.dtype) -> list[int]:
        return [max(1, min(self.num_shards, shape[0])), *([1] * (len(shape) - 1))]


class MinSizePartitioner:
    """As many shards as keep each at least ``min_shard_bytes``, at most ``max_shards``.

    Example:
        >>> MinSizePartitioner(min_shard_bytes=64, max_shards=8)((10, 4), torch.float32)  # 160 bytes
        [2, 1]
    """

    def __init__(self, min_shard_bytes: int = 256 << 10, max_shards: int = 1, bytes_per_string: int = 16) -> None:
        if min_shard_bytes < 1 or max_shards < 1:
            raise ValueError("min_shard_bytes and max_shards must be at least 1. Received: "
                             f"min_shard_bytes={min_shard_bytes}, max_shards={max_shards}")
        self.min_shard_bytes, self.max_shards, self.bytes_per_string = min_shard_bytes, max_shards, bytes_per_string

    def __call__(self, shape: Sequence[int], dtype: torch.dtype) -> list[int]:
        total = _row_bytes(shape, dtype, self.bytes_per_string) * shape[0]
        shards = max(1, min(self.max_shards, shape[0], total // self.min_shard_bytes))
        return [shards, *([1] * (len(shape) - 1))]


class MaxSizePartitioner:
    """The fewest shards that keep each at most ``max_shard_bytes`` (a row is never split).

    Example:
        >>> MaxSizePartitioner(max_shard_bytes=48)((10, 4), torch.float32)  # 3 rows of 16 bytes per shard
        [4, 1]
    """

    def __init__(self, max_shard_bytes: int, max_shards: int | None = None, bytes_per_string: int = 16) -> None:
        if max_shard_bytes < 1 or (max_shards is not None and max_shards < 1):
            raise ValueError("max_shard_bytes and max_shards must be at least 1. Received: "
                             f"max_shard_bytes={max_shard_bytes}, max_shards={max_shards}")
        self.max_shard_bytes, self.max_shards, self.bytes_per_string = max_shard_bytes, max_shards, bytes_per_string

    def __call__(self, shape: Sequence[int], dtype: torch.dtype) -> list[int]:
        rows_per_shard = max(1, self.max_shard_bytes // _row_bytes(shape, dtype, self.bytes_per_string))
        shards = -(-shape[0] // rows_per_shard)
        if self.max_shards is not None:
            shards = min(shards, self.max_shards)
        return [max(1, shards), *([1] * (len(shape) - 1))]


def shard_rows(num_rows: int, num_shards: int) -> list[range]:
    """Rows of each shard: contiguous, sizes differing by at most one, the longer ones first."""
    return [range(num_rows)[replica_slice(num_rows, num_shards, shard)] for shard in range(num_shards)]
