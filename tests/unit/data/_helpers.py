"""Shared by the data tests: elements as plain Python values, for exact comparisons."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def as_python(element: Any) -> Any:
    """Tensors and arrays as (nested) Python lists and scalars; dicts stay dicts, sequences become tuples."""
    if isinstance(element, dict):
        return {key: as_python(value) for key, value in element.items()}
    if isinstance(element, (tuple, list)):
        return tuple(as_python(value) for value in element)
    value = element.tolist() if isinstance(element, torch.Tensor) else np.asarray(element).tolist()
    return as_python(value) if isinstance(value, list) else value


def python_values(iterable: Any) -> list[Any]:
    return [as_python(element) for element in iterable]
