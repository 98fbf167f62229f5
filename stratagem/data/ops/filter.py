"""``FilterDataset``: the elements for which ``predicate`` is true; always streaming, its state is the parent's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from stratagem.data._structure import call_with_element
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext, ParentPositionIterator


class FilterDataset(Dataset):
    """Keeps the elements for which ``predicate`` is true; see ``Dataset.filter``.

    As in tf.data, a tuple element is unpacked into the predicate's positional arguments.

    Args:
        parent: The input dataset.
        predicate: A function of one element returning a Python bool, a numpy bool or a 0-d bool tensor.

    Raises:
        TypeError: If ``predicate`` is not callable, or (while iterating) returns anything but a boolean scalar.

    Example:
        >>> [int(x) for x in Dataset.range(6).filter(lambda x: x % 2 == 0)]
        [0, 2, 4]
    """

    def __init__(self, parent: Dataset, predicate: Callable[..., Any]) -> None:
        super().__init__(parent)
        if not callable(predicate):
            raise TypeError(f"predicate must be callable. Received: predicate of type {type(predicate).__name__}")
        self._predicate = predicate

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _FilterIterator(self._parents[0]._make_iterator(ctx), self._predicate)

    def __str__(self) -> str:
        return f"FilterDataset({getattr(self._predicate, '__name__', 'predicate')}) <- {self._parents[0]}"


class _FilterIterator(ParentPositionIterator):
    def __init__(self, parent: DatasetIterator, predicate: Callable[..., Any]) -> None:
        self._parent, self._predicate = parent, predicate

    def __next__(self) -> Any:
        while True:
            element = next(self._parent)
            if as_predicate_bool(call_with_element(self._predicate, element)):
                return element


def as_predicate_bool(result: Any) -> bool:
    """``result`` as a bool if it is a boolean scalar (Python, numpy, 0-d array or tensor); else TypeError."""
    if isinstance(result, (bool, np.bool_)):
        return bool(result)
    if isinstance(result, torch.Tensor) and result.ndim == 0 and result.dtype == torch.bool:
        return bool(result.item())
    if isinstance(result, np.ndarray) and result.ndim == 0 and result.dtype == np.bool_:
        return bool(result)
    if isinstance(result, (torch.Tensor, np.ndarray)):
        returned = f"{type(result).__name__} of shape {tuple(result.shape)} and dtype {result.dtype}"
    else:
        returned = f"{type(result).__name__} {result!r}"
    raise TypeError(
        "filter predicate must return a boolean scalar: a Python bool, a numpy bool or a 0-d bool tensor. Compare "
        f"explicitly (e.g. `x > 0`) or reduce with .all()/.any(). Received: predicate returned {returned}")
