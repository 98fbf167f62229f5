"""Python values in elements, converted as tf.data converts them (``tf.constant``'s dtypes).

int -> int32 (int64 if it does not fit), float -> float32, str -> utf-8 bytes, lists -> arrays; numpy and torch as is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_INT32 = np.iinfo(np.int32)
_ARRAYS = (np.ndarray, np.generic, torch.Tensor)


def python_to_array(value: Any) -> Any:
    """The array ``tf.constant(value)`` would hold, for a Python scalar or (nested) list."""
    array = np.asarray(value)
    if isinstance(value, np.generic):  # a numpy scalar keeps its dtype, as in TF
        return array
    if array.dtype == np.int64 and (array.size == 0 or (_INT32.min <= array.min() and array.max() <= _INT32.max)):
        return array.astype(np.int32)
    if array.dtype == np.float64:
        return array.astype(np.float32)
    if array.dtype.kind == "U":
        array = np.char.encode(array, "utf-8")
        return array[()] if array.ndim == 0 else array  # a scalar string is bytes, as TF's .numpy() gives
    return array


def from_python(structure: Any) -> Any:
    """``structure`` with its Python leaves converted by ``python_to_array``."""
    if isinstance(structure, _ARRAYS):
        return structure
    if isinstance(structure, dict):
        return {key: from_python(value) for key, value in structure.items()}
    if isinstance(structure, tuple):
        return type(structure)(from_python(value) for value in structure)
    return python_to_array(structure)


def map_output(value: Any) -> Any:
    """What a ``map`` function returned, as tf.data sees it: a top-level list is a tuple (structure)."""
    # The common cases (an array, an (x, y) tuple of arrays) return at once: this runs once per element.
    if isinstance(value, _ARRAYS):
        return value
    if type(value) is tuple:
        for leaf in value:
            if not isinstance(leaf, _ARRAYS):
                break
        else:
            return value
    return from_python(tuple(value) if isinstance(value, list) else value)
