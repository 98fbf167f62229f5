"""``bucket_by_sequence_length``: batches elements of similar length together, padded per bucket.

As in tf.data: ``group_by_window`` keyed by bucket, each window ``padded_batch``-ed (``batch``-ed with ``no_padding``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stratagem._nest import map_structure
from stratagem.data.dataset import Dataset
from stratagem.data.ops.group_by_window import GroupByWindowDataset

_INT32 = np.iinfo(np.int32)


def bucket_by_sequence_length(dataset: Dataset, element_length_func: Callable[..., Any],
                              bucket_boundaries: Sequence[int], bucket_batch_sizes: Sequence[int], *,
                              padded_shapes: Any = None, padding_values: Any = None,
                              pad_to_bucket_boundary: bool = False, no_padding: bool = False,
                              drop_remainder: bool = False) -> Dataset:
    """See ``Dataset.bucket_by_sequence_length``.

    Bucket ``i`` holds lengths in ``[bucket_boundaries[i-1], bucket_boundaries[i])`` (the first from -inf, the last to
    +inf). ``pad_to_bucket_boundary`` pads to the upper boundary minus one the ``None`` dimensions of ``padded_shapes``,
    else axis 0 of each non-scalar component (tf.data pads what its static shapes leave unknown).

    Raises:
        ValueError: If ``bucket_batch_sizes`` does not have one more entry than ``bucket_boundaries``, the boundaries do
            not increase, or (while iterating) an element is too long for ``pad_to_bucket_boundary``.
    """
    boundaries, sizes = [int(b) for b in bucket_boundaries], [int(s) for s in bucket_batch_sizes]
    if len(sizes) != len(boundaries) + 1:
        raise ValueError("bucket_batch_sizes must have one more entry than bucket_boundaries (one per bucket). "
                         f"Received: len(bucket_batch_sizes)={len(sizes)}, len(bucket_boundaries)={len(boundaries)}")
    if any(b <= a for a, b in zip(boundaries, boundaries[1:])):
        raise ValueError(f"bucket_boundaries must increase. Received: bucket_boundaries={boundaries}")
    lows, highs = [int(_INT32.min), *boundaries], [*boundaries, int(_INT32.max)]

    def bucket_of(*element: Any) -> np.int64:
        length = int(element_length_func(*element))  # group_by_window unpacked a tuple element, as tf.data
        return np.int64(next(i for i, (lo, hi) in enumerate(zip(lows, highs)) if lo <= length < hi))

    def batch_bucket(bucket: Any, rows: Dataset) -> Dataset:
        size = sizes[int(bucket)]
        if no_padding:
            return rows.batch(size, drop_remainder=drop_remainder)
        shapes = padded_shapes
        if pad_to_bucket_boundary:
            if int(bucket) == len(boundaries):
                raise ValueError("With pad_to_bucket_boundary=True every element must be shorter than the last "
                                 f"bucket boundary. Received: an element of length >= {boundaries[-1]}")
            shapes = _bucket_shapes(rows, padded_shapes, boundaries[int(bucket)] - 1)
        return rows.padded_batch(size, padded_shapes=shapes, padding_values=padding_values,
                                 drop_remainder=drop_remainder)

    return GroupByWindowDataset(dataset, bucket_of, batch_bucket, window_size_func=lambda b: np.int64(sizes[int(b)]))


def _bucket_shapes(rows: Dataset, padded_shapes: Any, length: int) -> Any:
    """``padded_shapes`` with None as ``length``, or axis 0 of each non-scalar component padded to ``length``."""
    if padded_shapes is not None:
        return map_structure(lambda d: length if d is None or d == -1 else d, padded_shapes)
    first = next(iter(rows))  # every element of a window has this structure and rank
    return map_structure(lambda leaf: [length, *np.shape(leaf)[1:]] if np.ndim(leaf) else [], first)
