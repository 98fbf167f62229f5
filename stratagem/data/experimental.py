"""``tf.data.experimental``'s fused transformations, for ``dataset.apply``: the plain ops composed, same elements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stratagem.data.dataset import Dataset


def shuffle_and_repeat(buffer_size: int, count: int | None = None, seed: int | None = None) -> Callable[[Dataset], Dataset]:
    """``tf.data.experimental.shuffle_and_repeat``: shuffle, then repeat ``count`` times (forever if None), reshuffling each pass."""
    return lambda dataset: dataset.shuffle(buffer_size, seed=seed).repeat(count)


def map_and_batch(map_func: Callable[..., Any], batch_size: int, num_parallel_batches: int | None = None,
                  drop_remainder: bool = False, num_parallel_calls: int | None = None) -> Callable[[Dataset], Dataset]:
    """``tf.data.experimental.map_and_batch``: ``map`` then ``batch`` (both parallelism arguments raise, as in TF)."""
    if num_parallel_batches is not None and num_parallel_calls is not None:
        raise ValueError("Pass num_parallel_batches or num_parallel_calls, not both. Received: "
                         f"num_parallel_batches={num_parallel_batches}, num_parallel_calls={num_parallel_calls}")
    if num_parallel_batches is not None:
        num_parallel_calls = num_parallel_batches * batch_size  # TF's reading of num_parallel_batches
    return lambda dataset: dataset.map(map_func, num_parallel_calls=num_parallel_calls).batch(
        batch_size, drop_remainder=drop_remainder)


__all__ = ["map_and_batch", "shuffle_and_repeat"]
