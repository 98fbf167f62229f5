"""TF's small non-image ops that input functions use: ``read_file``, ``strings.split``, ``one_hot``, lookup tables.

Strings are ``bytes`` (``str`` is accepted wherever TF takes a string); tensors are torch tensors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def read_file(filename: bytes | str | os.PathLike[str]) -> bytes:
    """``tf.io.read_file``: the file's contents as bytes."""
    path = os.fsdecode(filename) if isinstance(filename, bytes) else os.fspath(filename)
    with open(path, "rb") as file:
        return file.read()


def split(input: Any, sep: bytes | str | None = None, maxsplit: int = -1) -> list[Any]:  # noqa: A002 (TF's name)
    """``tf.strings.split``: pieces as a list of bytes (lists for a list); ``sep=None`` splits on whitespace runs."""
    if isinstance(input, (list, tuple, np.ndarray)):
        return [split(item, sep, maxsplit) for item in input]
    text = _as_bytes(input)
    return text.split(None if sep is None else _as_bytes(sep), maxsplit)


def one_hot(indices: Any, depth: int, on_value: float = 1.0, off_value: float = 0.0, axis: int = -1,
            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``tf.one_hot``: a new axis of ``depth``; an index outside ``[0, depth)`` gives an all-``off_value`` row."""
    indices = torch.as_tensor(indices)
    if indices.dtype.is_floating_point or indices.dtype == torch.bool:
        raise TypeError(f"one_hot indices must be integers. Received: indices of dtype {indices.dtype}")
    hot = indices.unsqueeze(-1) == torch.arange(int(depth), device=indices.device)
    out = torch.where(hot, torch.tensor(on_value, dtype=dtype), torch.tensor(off_value, dtype=dtype))
    return out if axis == -1 else out.movedim(-1, axis)


class KeyValueTensorInitializer:
    """``tf.lookup.KeyValueTensorInitializer``: a ``StaticHashTable``'s keys (strings as bytes, or ints) and values."""

    def __init__(self, keys: Sequence[Any] | torch.Tensor, values: Sequence[Any] | torch.Tensor, key_dtype: Any = None,
                 value_dtype: Any = None) -> None:
        self.keys = [_key(k) for k in _as_list(keys)]
        self.values: torch.Tensor
        if isinstance(values, (torch.Tensor, np.ndarray)):
            self.values = torch.as_tensor(values)  # a tensor keeps its dtype
        else:
            array = np.asarray(list(values))
            # Python ints/floats become int32/float32, as tf.constant makes them.
            dtype = {"i": torch.int32, "u": torch.int32, "f": torch.float32}.get(array.dtype.kind)
            self.values = torch.as_tensor(array, dtype=dtype)
        if len(self.keys) != len(self.values):
            raise ValueError(f"keys and values must have the same length. Received: {len(self.keys)} keys, "
                             f"{len(self.values)} values")


class StaticHashTable:
    """``tf.lookup.StaticHashTable``: an immutable map; ``lookup`` gives ``default_value`` for missing keys.

    Example:
        >>> table = StaticHashTable(KeyValueTensorInitializer(["cat", "dog"], [0, 1]), default_value=-1)
        >>> int(table.lookup(b"dog"))
        1
    """

    def __init__(self, initializer: KeyValueTensorInitializer, default_value: Any) -> None:
        self._index = {key: i for i, key in enumerate(initializer.keys)}
        self._values = initializer.values
        self._default = torch.tensor(default_value, dtype=self._values.dtype)

    def lookup(self, keys: Any) -> torch.Tensor:
        """The value of each key: a scalar for one key, else a tensor of the keys' shape."""
        if isinstance(keys, (list, tuple, np.ndarray)):
            return torch.stack([self.lookup(key) for key in keys]) if len(keys) else self._values[:0]
        position = self._index.get(_key(keys))
        return self._default.clone() if position is None else self._values[position].clone()

    def size(self) -> torch.Tensor:
        return torch.tensor(len(self._index), dtype=torch.int64)


def index_table_from_tensor(mapping: Sequence[Any], num_oov_buckets: int = 0, default_value: int = -1) -> StaticHashTable:
    """TF 1's ``tf.contrib.lookup.index_table_from_tensor``: each string's int64 position in ``mapping``.

    ``num_oov_buckets`` (hash buckets for unknown strings) raises ``ValueError``: not offered.
    """
    if num_oov_buckets:
        raise ValueError("num_oov_buckets is not supported: unknown keys map to default_value. "
                         f"Received: num_oov_buckets={num_oov_buckets}")
    keys = _as_list(mapping)
    values = torch.arange(len(keys), dtype=torch.int64)
    return StaticHashTable(KeyValueTensorInitializer(keys, values), default_value=default_value)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, np.bytes_):
        return bytes(value)
    raise TypeError(f"Expected a string (bytes or str). Received: {type(value).__name__}")


def _key(value: Any) -> Any:
    if isinstance(value, (str, bytes, np.bytes_, np.str_)):
        return _as_bytes(str(value) if isinstance(value, np.str_) else value)
    if isinstance(value, torch.Tensor):
        return value.item()
    return value.item() if isinstance(value, np.generic) else value


def _as_list(values: Any) -> list[Any]:
    if isinstance(values, torch.Tensor):
        return values.tolist()
    return list(values)


__all__ = ["KeyValueTensorInitializer", "StaticHashTable", "index_table_from_tensor", "one_hot", "read_file", "split"]
