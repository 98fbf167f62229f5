"""``tf.dtypes``: ``tf.float32`` and the other dtypes, ``DType`` and ``as_dtype``.

A ``DType`` names a torch dtype and compares equal to it, to its name and to the numpy dtype, so ``x.dtype ==
tf.float32`` holds for torch tensors, Keras variables and numpy arrays. ``tf.string`` has no torch dtype: strings are
``bytes`` (numpy ``S`` arrays). Keras takes a ``DType`` (it reads ``.name``); torch wants ``dtype.as_torch_dtype``.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np
import torch

from stratagem.tf._refusal import module_getattr


class DType:
    """``tf.DType``: a tensor element type.

    Attributes:
        name: TF's name (``"float32"``).
        as_numpy_dtype: The numpy scalar type (``np.float32``; ``np.object_`` for ``string``).
        as_torch_dtype: The torch dtype, or None for ``string`` (stratagem's addition: torch takes no ``DType``).

    Example:
        >>> import stratagem.tf as tf
        >>> tf.constant([1.0]).dtype == tf.float32
        True
    """

    def __init__(self, name: str, torch_dtype: torch.dtype | None, numpy_type: type | None) -> None:
        self.name = name
        self.as_torch_dtype = torch_dtype
        self._numpy_type = numpy_type

    @property
    def as_numpy_dtype(self) -> type:
        if self._numpy_type is None:  # bfloat16: numpy has none; ml_dtypes (installed with Keras) adds it, as TF does
            import ml_dtypes

            return ml_dtypes.bfloat16  # type: ignore[no-any-return]
        return self._numpy_type

    @property
    def is_floating(self) -> builtins.bool:
        return self.as_torch_dtype is not None and self.as_torch_dtype.is_floating_point

    @property
    def is_integer(self) -> builtins.bool:
        return self.name.startswith(("int", "uint"))

    @property
    def is_unsigned(self) -> builtins.bool:
        return self.name.startswith("uint")  # TF: bool has no ordering, so it is not "unsigned"

    @property
    def is_bool(self) -> builtins.bool:
        return self.name == "bool"

    @property
    def is_complex(self) -> builtins.bool:
        return self.name.startswith("complex")

    @property
    def is_numeric(self) -> builtins.bool:
        return self.name not in ("string", "bool")

    @property
    def base_dtype(self) -> DType:
        return self

    @property
    def real_dtype(self) -> DType:
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    @property
    def size(self) -> int:
        """Bytes per element (1 for ``string``, as TF reports)."""
        return 1 if self.as_torch_dtype is None else self.as_torch_dtype.itemsize

    @property
    def min(self) -> Any:
        return self._limits().min

    @property
    def max(self) -> Any:
        return self._limits().max

    def _limits(self) -> Any:
        if self.is_bool:
            return _BoolLimits
        if self.is_integer:
            return np.iinfo(self.as_numpy_dtype)
        if self.is_floating and self.as_torch_dtype is not None:
            return _FloatLimits(torch.finfo(self.as_torch_dtype))
        raise TypeError(f"Cannot find minimum/maximum value for dtype {self.name}")

    def is_compatible_with(self, other: Any) -> builtins.bool:
        return self == as_dtype(other)

    def __eq__(self, other: object) -> builtins.bool:
        if isinstance(other, DType):
            return self.name == other.name
        if isinstance(other, torch.dtype):
            return self.as_torch_dtype == other
        if isinstance(other, str):
            return self.name == other
        try:
            return as_dtype(other).name == self.name
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"tf.{self.name}"

    def __str__(self) -> str:
        return f"<dtype: '{self.name}'>"

    def __reduce__(self) -> tuple[Any, ...]:
        return as_dtype, (self.name,)


class _BoolLimits:
    min = False
    max = True


class _FloatLimits:
    def __init__(self, info: torch.finfo) -> None:
        self.min, self.max = info.min, info.max


float16 = DType("float16", torch.float16, np.float16)
bfloat16 = DType("bfloat16", torch.bfloat16, None)
float32 = DType("float32", torch.float32, np.float32)
float64 = DType("float64", torch.float64, np.float64)
int8 = DType("int8", torch.int8, np.int8)
int16 = DType("int16", torch.int16, np.int16)
int32 = DType("int32", torch.int32, np.int32)
int64 = DType("int64", torch.int64, np.int64)
uint8 = DType("uint8", torch.uint8, np.uint8)
uint16 = DType("uint16", torch.uint16, np.uint16)
uint32 = DType("uint32", torch.uint32, np.uint32)
uint64 = DType("uint64", torch.uint64, np.uint64)
bool = DType("bool", torch.bool, np.bool_)  # noqa: A001 (TF's name)
complex64 = DType("complex64", torch.complex64, np.complex64)
complex128 = DType("complex128", torch.complex128, np.complex128)
string = DType("string", None, np.object_)
half = float16
double = float64

_BY_NAME: dict[str, DType] = {d.name: d for d in (
    float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, complex64,
    complex128, string)}
_ALIASES = {"half": float16, "float": float32, "double": float64, "bytes": string, "str": string, "object": string}
_BY_TORCH: dict[torch.dtype, DType] = {d.as_torch_dtype: d for d in _BY_NAME.values() if d.as_torch_dtype is not None}


def as_dtype(type_value: Any) -> DType:
    """``tf.as_dtype``: the ``DType`` of a ``DType``, name, torch dtype, numpy dtype or Python type (else TypeError)."""
    if isinstance(type_value, DType):
        return type_value
    if isinstance(type_value, torch.dtype):
        if type_value in _BY_TORCH:
            return _BY_TORCH[type_value]
    elif isinstance(type_value, str):
        name = type_value.removeprefix("tf.").removeprefix("torch.")
        found = _BY_NAME.get(name) or _ALIASES.get(name)
        if found is not None:
            return found
    else:
        try:
            numpy_dtype = np.dtype(type_value)
        except TypeError:
            numpy_dtype = None
        if numpy_dtype is not None:
            if numpy_dtype.kind in "SUO":
                return string
            if numpy_dtype.name == "bfloat16":  # ml_dtypes' numpy extension type
                return bfloat16
            if numpy_dtype.name in _BY_NAME:
                return _BY_NAME[numpy_dtype.name]
    raise TypeError(f"Cannot convert {type_value!r} to a dtype. Use one of tf.{', tf.'.join(sorted(_BY_NAME))}. "
                    f"Received: type_value={type_value!r}")


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype for a TF dtype argument; ``TypeError`` for ``string`` (torch holds no strings)."""
    resolved = as_dtype(dtype).as_torch_dtype
    if resolved is None:
        raise TypeError("tf.string has no torch dtype: strings here are Python bytes, not tensors. "
                        f"Received: dtype={dtype!r}")
    return resolved


# cast and saturate_cast live in a module that imports this one: resolved on use, to avoid an import cycle.
__getattr__ = module_getattr("tf.dtypes", {name: ("stratagem.tf._array_ops", name) for name in ("cast", "saturate_cast")})

__all__ = [
    "DType", "as_dtype", "bfloat16", "bool", "cast", "complex128", "complex64", "double", "float16", "float32",
    "float64", "half", "int16", "int32", "int64", "int8", "saturate_cast", "string", "uint16", "uint32", "uint64",
    "uint8",
]
