"""Tensors as TF's ops see them: conversion with ``tf.constant``'s dtypes, and TF's no-implicit-promotion rule.

``tf.Tensor`` is ``torch.Tensor``. A Python value converts as ``tf.constant`` converts it (int -> int32, float ->
float32, str -> bytes); numpy values keep their dtype. Also ``tf.TensorShape``, ``tf.TensorSpec`` and ``tf.TypeSpec``.
NOTE: as TF, ``stratagem.tf``'s ops never promote (``TypeError`` naming ``tf.cast``), so code that runs here runs in TF
with the same dtypes; Python operators on torch tensors are torch's and promote.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from stratagem.data._python_values import python_to_array
from stratagem.tf import dtypes

Tensor = torch.Tensor


def unwrap(value: Any) -> Any:
    # A Keras variable (tf.Variable is one) holds its torch tensor in `.value`.
    inner = getattr(value, "value", None)
    if isinstance(inner, torch.Tensor) and not isinstance(value, torch.Tensor):
        return inner
    return value


def _to_numpy(value: Any, dtype: dtypes.DType | None) -> np.ndarray:
    """A Python or numpy value as the array TF would make (``tf.constant``'s dtypes; numpy keeps its own)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)  # numpy values cast to any requested dtype, as in TF
    array = np.asarray(python_to_array(value))
    if dtype is not None and (dtype.is_integer or dtype.is_bool) and array.dtype.kind in "fc":
        # TF refuses a Python float for an integer dtype (tf.constant(1.0, tf.int32) raises); tf.cast converts.
        raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}, as TF cannot. Use tf.cast "
                        f"to convert floats to integers. Received: {value!r}")
    return array


def convert(value: Any, dtype: Any = None) -> Any:
    """``tf.convert_to_tensor``: a torch tensor (bytes or numpy ``S`` for strings); a tensor of another dtype raises."""
    value = unwrap(value)
    target = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(value, torch.Tensor):
        if target is not None and target != value.dtype:
            raise ValueError(f"Tensor conversion requested dtype {target.name} for a tensor of dtype "
                             f"{dtypes.as_dtype(value.dtype).name}. Use tf.cast to change a tensor's dtype. "
                             f"Received: dtype={target.name}")
        return value
    if isinstance(value, (list, tuple)) and any(isinstance(unwrap(v), torch.Tensor) for v in value):
        return torch.stack([convert(v, dtype) for v in value])  # tf.constant([t1, t2]) packs tensors
    if isinstance(value, (bytes, str)) or (target is not None and target == dtypes.string):
        return _strings(value)
    array = _to_numpy(value, target)
    if array.dtype.kind in "SUO":
        return _strings(array)
    result = torch.from_numpy(np.array(array, copy=True))
    return result if target is None else result.to(target.as_torch_dtype)


def _strings(value: Any) -> Any:
    """Strings as ``stratagem.data`` holds them: ``bytes`` for one, a numpy ``S`` array for several."""
    array = np.asarray(value if isinstance(value, np.ndarray) else python_to_array(value))
    if array.dtype.kind == "U":
        array = np.char.encode(array, "utf-8")
    array = array.astype(np.bytes_)
    return bytes(array[()]) if array.ndim == 0 else array


def tensor(value: Any, dtype: Any = None) -> torch.Tensor:
    """``convert`` for ops that take only numbers: refuses strings with a clear message."""
    result = convert(value, dtype)
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"This op takes numeric tensors; strings are Python bytes here. Received: {value!r}")
    return result


def is_tensor(value: Any) -> bool:
    """``tf.is_tensor``: a torch tensor or a variable."""
    return isinstance(unwrap(value), torch.Tensor)


def operands(op: str, *values: Any) -> list[torch.Tensor]:
    """An element-wise op's tensors: Python values take the tensors' dtype; tensors of two dtypes raise TypeError."""
    first = next((unwrap(v) for v in values if is_tensor(v)), None)
    if first is None:
        first = tensor(values[0])
    dtype = first.dtype
    result = []
    for value in values:
        converted = tensor(value, None if is_tensor(value) else dtype)
        if converted.dtype != dtype:
            raise TypeError(
                f"tf.{op} needs operands of one dtype: TensorFlow does not promote {_name(dtype)} and "
                f"{_name(converted.dtype)} implicitly, and neither does stratagem.tf. Cast one with tf.cast(x, "
                f"tf.{_name(dtype)}). Received: dtypes {_name(dtype)} and {_name(converted.dtype)}")
        result.append(converted)
    return result


def _name(dtype: torch.dtype) -> str:
    return dtypes.as_dtype(dtype).name


class TensorShape(tuple):  # type: ignore[type-arg]
    """``tf.TensorShape``: a tuple of dimensions, None for an unknown size (``TensorShape(None)``: unknown rank)."""

    _known_rank: bool

    def __new__(cls, dims: Iterable[int | None] | None) -> TensorShape:
        shape = super().__new__(cls, () if dims is None else (None if d is None else int(d) for d in dims))
        shape._known_rank = dims is not None
        return shape

    @property
    def rank(self) -> int | None:
        return len(self) if self._known_rank else None

    ndims = rank

    def as_list(self) -> list[int | None]:
        if not self._known_rank:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self)

    def is_fully_defined(self) -> bool:
        return self._known_rank and all(d is not None for d in self)

    def num_elements(self) -> int | None:
        return math.prod(self) if self.is_fully_defined() else None  # type: ignore[arg-type]

    def is_compatible_with(self, other: Any) -> bool:
        other = other if isinstance(other, TensorShape) else TensorShape(other)
        if self.rank is None or other.rank is None:
            return True
        return len(self) == len(other) and all(a is None or b is None or a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"TensorShape({list(self) if self._known_rank else None})"


class TypeSpec(abc.ABC):
    """``tf.TypeSpec``: the base class of value specs. ``TensorSpec`` is the only one here (no sparse or ragged values)."""

    @property
    @abc.abstractmethod
    def value_type(self) -> type:
        """The Python type of the values this spec describes."""


class TensorSpec(TypeSpec):
    """``tf.TensorSpec``: the shape and dtype of a tensor (``from_generator``'s ``output_signature``, ``tf.function``).

    Example:
        >>> import stratagem.tf as tf
        >>> tf.TensorSpec(shape=(None, 2), dtype=tf.float32).is_compatible_with(tf.zeros([3, 2]))
        True
    """

    def __init__(self, shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> None:
        self.shape = shape if isinstance(shape, TensorShape) else TensorShape(shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.name = name

    @property
    def value_type(self) -> type:
        return torch.Tensor

    @classmethod
    def from_tensor(cls, value: Any, name: str | None = None) -> TensorSpec:
        value = tensor(value)
        return cls(tuple(value.shape), value.dtype, name)

    def is_compatible_with(self, spec_or_value: Any) -> bool:
        other = spec_or_value if isinstance(spec_or_value, TensorSpec) else TensorSpec.from_tensor(spec_or_value)
        return self.dtype == other.dtype and self.shape.is_compatible_with(other.shape)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TensorSpec) and self.shape == other.shape and self.dtype == other.dtype
                and self.name == other.name)

    def __hash__(self) -> int:
        return hash((tuple(self.shape), self.dtype, self.name))

    def __repr__(self) -> str:
        shape = tuple(self.shape) if self.shape.rank is not None else None
        return f"TensorSpec(shape={shape}, dtype={self.dtype!r}, name={self.name!r})"


newaxis = None
