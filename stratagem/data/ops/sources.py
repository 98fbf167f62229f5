"""In-memory sources: ``from_tensor_slices``, ``from_tensors``, ``range``. All random-access."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from stratagem._nest import map_structure
from stratagem.data._python_values import python_to_array
from stratagem.data._structure import gather_rows, leaves, take_rows
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import IterContext


def _as_components(value: Any) -> Any:
    """Tuples and dicts are structure; anything else, a list included, is one array (as in tf.data)."""
    if isinstance(value, dict):
        return {key: _as_components(sub) for key, sub in value.items()}
    if isinstance(value, tuple):
        return type(value)(_as_components(sub) for sub in value)
    return value if isinstance(value, (torch.Tensor, np.ndarray)) else python_to_array(value)


class TensorSliceDataset(Dataset):
    """Row ``i`` of every component; batches are gathered with one fancy index per component."""

    def __init__(self, tensors: Any) -> None:
        super().__init__()
        self._tensors = _as_components(tensors)
        lengths = [int(np.shape(leaf)[0]) if np.ndim(leaf) else -1 for leaf in leaves(self._tensors)]
        if not lengths or min(lengths) < 0:
            raise ValueError("from_tensor_slices needs arrays with at least one axis. Received: a scalar component")
        if len(set(lengths)) != 1:
            raise ValueError("All components of from_tensor_slices must have the same first dimension. Received: first "
                             f"dimensions {lengths}")
        self._num = lengths[0]

    def _length(self) -> int:
        return self._num

    def _get(self, index: int, ctx: IterContext) -> Any:
        return take_rows(self._tensors, index)

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        rows = np.asarray(indices, dtype=np.int64)
        return gather_rows(self._tensors, rows)

    def _rows_independent(self, ctx: IterContext) -> bool:
        return True

    def __str__(self) -> str:
        return f"TensorSliceDataset({self._num} elements)"


class TensorDataset(Dataset):
    """Exactly one element."""

    def __init__(self, tensors: Any) -> None:
        super().__init__()
        self._tensors = _as_components(tensors)

    def _length(self) -> int:
        return 1

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._tensors


class RangeDataset(Dataset):
    """int64 scalars of ``range(start, stop, step)``."""

    def __init__(self, *args: int) -> None:
        super().__init__()
        if not 1 <= len(args) <= 3:
            raise ValueError(f"range takes 1 to 3 arguments (start, stop, step). Received: {len(args)} arguments")
        if len(args) == 3 and args[2] == 0:  # checked first: Python's range() would raise without naming step
            raise ValueError("range step must not be 0. Received: step=0")
        self._range = range(*args)

    def _length(self) -> int:
        return len(self._range)

    def _get(self, index: int, ctx: IterContext) -> Any:
        return np.int64(self._range[index])

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        return np.asarray(indices, dtype=np.int64) * self._range.step + self._range.start

    def __str__(self) -> str:
        return f"RangeDataset({self._range.start}, {self._range.stop}, {self._range.step})"
