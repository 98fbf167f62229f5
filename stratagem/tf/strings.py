"""``tf.strings``: string ops on ``bytes`` (numpy ``S`` arrays for several), as ``stratagem.data`` holds strings."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from stratagem.strings import split
from stratagem.tf import dtypes
from stratagem.tf._refusal import module_getattr
from stratagem.tf._tensor import convert


def _each(function: Callable[[bytes], Any], input: Any) -> Any:  # noqa: A002 (TF's name)
    value = convert(input, dtypes.string)
    if isinstance(value, bytes):
        return function(value)
    return np.vectorize(function, otypes=[object])(value)


def substr(input: Any, pos: int, len: int, unit: str = "BYTE", name: str | None = None) -> Any:  # noqa: A002
    """``tf.strings.substr``: ``len`` bytes from ``pos`` (negative: from the end) of each string."""
    def cut(text: bytes) -> bytes:
        start = pos if pos >= 0 else builtins.len(text) + pos
        return text[start:start + len]

    return _as_strings(_each(cut, input))


def length(input: Any, unit: str = "BYTE", name: str | None = None) -> torch.Tensor:  # noqa: A002
    """``tf.strings.length``: int32 byte counts (``unit="UTF8_CHAR"`` counts characters)."""
    count = (lambda t: builtins.len(t.decode())) if unit == "UTF8_CHAR" else builtins.len
    return torch.as_tensor(np.asarray(_each(count, input), dtype=np.int32))


def to_number(string_tensor: Any, out_type: Any = dtypes.float32, name: str | None = None) -> torch.Tensor:
    """``tf.strings.to_number``: parses each string (float32 by default)."""
    target = dtypes.as_dtype(out_type)
    parse = float if target.is_floating else int
    return torch.as_tensor(np.asarray(_each(parse, string_tensor), dtype=target.as_numpy_dtype))


def lower(input: Any, encoding: str = "", name: str | None = None) -> Any:  # noqa: A002
    return _as_strings(_each(bytes.lower, input))


def upper(input: Any, encoding: str = "", name: str | None = None) -> Any:  # noqa: A002
    return _as_strings(_each(bytes.upper, input))


def strip(input: Any, name: str | None = None) -> Any:  # noqa: A002
    return _as_strings(_each(bytes.strip, input))


def join(inputs: Any, separator: str = "", name: str | None = None) -> Any:
    """``tf.strings.join``: element-wise concatenation of the inputs with ``separator``."""
    parts = [convert(part, dtypes.string) for part in inputs]
    glue = separator.encode() if isinstance(separator, str) else separator
    if all(isinstance(part, bytes) for part in parts):
        return glue.join(parts)
    columns = np.broadcast_arrays(*[np.asarray(part, dtype=object) for part in parts])
    return _as_strings(np.vectorize(lambda *row: glue.join(row), otypes=[object])(*columns))


def _as_strings(value: Any) -> Any:
    return value if isinstance(value, bytes) else np.asarray(value.tolist(), dtype=np.bytes_)


__getattr__ = module_getattr("tf.strings")
__all__ = ["join", "length", "lower", "split", "strip", "substr", "to_number", "upper"]
