"""``PaddedBatchDataset``: ``batch`` for elements of different shapes, padding each component.

tf.data's rules: each component is padded at the end of every axis to the batch's largest, or to ``padded_shapes``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import IterContext
from stratagem.data.ops.batch import BatchingDataset


class PaddedBatchDataset(BatchingDataset):
    """Batches elements, padding them to one shape; see ``Dataset.padded_batch``.

    Args:
        parent: The input dataset.
        batch_size: Elements per batch.
        padded_shapes: None (pad every axis to the largest in the batch), or a structure like the elements whose leaves
            are shapes (lists of ints, with None or -1 for "largest in the batch").
        padding_values: None (0, ``""`` or False by dtype), one scalar for every component, or a structure of scalars
            like the elements.
        drop_remainder: Drop a last batch smaller than ``batch_size``.

    Raises:
        ValueError: If ``batch_size`` is not positive; while iterating, if an element is larger than a fixed padded
            size, ranks differ, or ``padded_shapes`` does not fit the elements.

    Example:
        >>> ds = Dataset.range(1, 4).map(lambda n: np.full(int(n), n)).padded_batch(3)
        >>> next(iter(ds)).tolist()
        [[1, 0, 0], [2, 2, 0], [3, 3, 3]]
    """

    def __init__(self, parent: Dataset, batch_size: int, *, padded_shapes: Any = None, padding_values: Any = None,
                 drop_remainder: bool = False) -> None:
        super().__init__(parent, batch_size, drop_remainder=bool(drop_remainder))
        self._padded_shapes, self._padding_values = padded_shapes, padding_values

    def _get(self, index: int, ctx: IterContext) -> Any:
        rows = self.rows(index)
        return self.combine([self._parents[0]._get(i, ctx) for i in rows], first_index=rows.start)

    def combine(self, elements: Sequence[Any], first_index: int | None = None) -> Any:
        """``elements`` padded and stacked; ``first_index`` (their input position) names them in errors."""
        return _pad_structure(list(elements), self._padded_shapes, self._padding_values,
                              _Where(first_index, "padded_shapes"))

    def __str__(self) -> str:
        return (f"PaddedBatchDataset({self.batch_size}, padded_shapes={self._padded_shapes}, "
                f"drop_remainder={self.drop_remainder}) <- {self._parents[0]}")


class _Where:
    """Where in the batch and in ``padded_shapes`` a component is, for error messages."""

    def __init__(self, first_index: int | None, path: str) -> None:
        self.first_index, self.path = first_index, path

    def child(self, key: Any) -> _Where:
        return _Where(self.first_index, f"{self.path}[{key!r}]")

    def element(self, i: int) -> str:
        where = f"element {i} of the batch"
        return where if self.first_index is None else f"{where} (input element {self.first_index + i})"


def _pad_structure(elements: list[Any], shapes: Any, values: Any, where: _Where) -> Any:
    first = elements[0]
    if not isinstance(first, (dict, tuple, list)):
        return _pad_leaves(elements, shapes, values, where)
    keys = list(first) if isinstance(first, dict) else list(range(len(first)))
    if shapes is not None and (isinstance(shapes, dict) != isinstance(first, dict) or len(shapes) != len(keys)):
        raise ValueError(
            f"{where.path} must have the same structure as the elements. "
            f"Received: {where.path}={shapes!r} for elements with components {keys}"
        )
    parts = {}
    for key in keys:
        sub_shapes = None if shapes is None else shapes[key]
        sub_values = values[key] if isinstance(values, (dict, tuple, list)) else values
        parts[key] = _pad_structure([e[key] for e in elements], sub_shapes, sub_values, where.child(key))
    return parts if isinstance(first, dict) else type(first)(parts[k] for k in keys)


def _target_shape(shapes: list[tuple[int, ...]], spec: Any, where: _Where) -> tuple[int, ...]:
    ndim = len(shapes[0])
    for i, shape in enumerate(shapes):
        if len(shape) != ndim:
            raise ValueError(f"padded_batch needs components of one rank: {where.element(0)} has shape {shapes[0]} but "
                             f"{where.element(i)} has shape {shape}. Received: ranks {ndim} and {len(shape)}")
    largest = tuple(max(shape[axis] for shape in shapes) for axis in range(ndim))
    if spec is None:
        return largest
    if isinstance(spec, (int, np.integer)):  # tf.data accepts ``padded_shapes=5`` for vectors
        spec = [spec]
    spec = [None if d is None else int(d) for d in (spec.tolist() if isinstance(spec, np.ndarray) else spec)]
    if len(spec) != ndim or any(d is not None and d < -1 for d in spec):
        raise ValueError(f"{where.path} must be a shape of rank {ndim} with sizes >= 0, or None/-1 for the largest in "
                         f"the batch. Received: {where.path}={spec}")
    target = tuple(big if d is None or d == -1 else d for d, big in zip(spec, largest))
    for i, shape in enumerate(shapes):
        if any(size > limit for size, limit in zip(shape, target)):
            raise ValueError(f"padded_batch: {where.element(i)} has shape {shape}, larger than the padded shape "
                             f"{target} ({where.path}). Raise {where.path}, or truncate the element first. Received: "
                             f"shape {shape}, padded shape {target}")
    return target


def _pad_leaves(elements: list[Any], spec: Any, value: Any, where: _Where) -> Any:
    shapes = [tuple(np.shape(e)) for e in elements]
    target = _target_shape(shapes, spec, where)
    if isinstance(value, torch.Tensor):
        value = value.item()
    if value is not None and np.ndim(value) != 0:
        raise ValueError(f"padding_values must hold scalars. Received: a value of shape {np.shape(value)}")
    out: Any
    if isinstance(elements[0], torch.Tensor):
        out = torch.full((len(elements), *target), 0 if value is None else value, dtype=elements[0].dtype)
    else:
        arrays = [np.asarray(e) for e in elements]
        dtype = functools.reduce(np.promote_types, {a.dtype for a in arrays})  # strings: the widest, none truncated
        out = np.zeros((len(elements), *target), dtype) if value is None else np.full((len(elements), *target), value, dtype)
        elements = arrays
    for i, (element, shape) in enumerate(zip(elements, shapes)):
        out[(i, *(slice(0, size) for size in shape))] = element
    return out
