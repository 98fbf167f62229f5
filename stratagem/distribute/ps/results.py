"""Values on the wire without pickle: a JSON tree whose tensors, arrays and bytes travel as raw bytes.

The package's one value codec: a parameter-server step's return value (``RemoteValue.fetch``) and Horovod's
``broadcast_object``/``allgather_object``. Bytes from the network are never unpickled. A value is None, bool, int,
float, str, bytes, a tensor, a NumPy array or scalar, or lists, tuples and dicts of them; tensors, arrays and bytes
go in ``wire``'s format, validated before any tensor is built. Anything else is a ``TypeError`` naming its type.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
import torch

from stratagem.distribute.ps import wire

_SUPPORTED = ("None, bool, int, float, str, bytes, torch tensors, NumPy arrays and scalars, and lists, tuples "
              "and dicts of them")


def encode_value(value: Any, *, what: str = "A value") -> bytes:
    """``value`` as one wire message; ``what`` names it in the ``TypeError`` for an unsupported type."""
    tensors: dict[str, torch.Tensor] = {}

    def tensor_key(tensor: torch.Tensor) -> str:
        key = f"t{len(tensors)}"
        tensors[key] = tensor.detach().cpu()
        return key

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        if isinstance(item, torch.Tensor):
            return {"__tensor__": tensor_key(item)}
        if isinstance(item, (np.ndarray, np.generic)):
            return {"__ndarray__": tensor_key(torch.from_numpy(np.ascontiguousarray(item)))}
        if isinstance(item, (bytes, bytearray)):
            return {"__bytes__": tensor_key(torch.frombuffer(bytearray(item), dtype=torch.uint8) if item
                                            else torch.zeros(0, dtype=torch.uint8))}
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, tuple):
            return {"__tuple__": [walk(x) for x in item]}
        if isinstance(item, dict):
            return {"__dict__": [[walk(k), walk(v)] for k, v in item.items()]}
        raise TypeError(f"{what} travels without pickle, so it may hold {_SUPPORTED}. Convert it to those (e.g. a "
                        f"dict of its fields). Received: type={type(item).__qualname__}")

    return wire.encode(tensors, {"value": walk(value)})


def decode_value(message: bytes, *, tensors_as_numpy: bool = True) -> Any:
    """The value ``encode_value`` wrote: tensors as NumPy arrays (as ``RemoteValue.fetch`` returns them) or,
    with ``tensors_as_numpy=False``, as tensors. Raises ``ValueError`` for a malformed message."""
    tensors, meta = wire.decode(message)

    def walk(item: Any) -> Any:
        if isinstance(item, list):
            return [walk(x) for x in item]
        if not isinstance(item, dict):
            return item
        if "__tensor__" in item:
            return tensors[item["__tensor__"]].numpy() if tensors_as_numpy else tensors[item["__tensor__"]]
        if "__ndarray__" in item:
            return tensors[item["__ndarray__"]].numpy()
        if "__bytes__" in item:
            return tensors[item["__bytes__"]].numpy().tobytes()
        if "__tuple__" in item:
            return tuple(walk(x) for x in item["__tuple__"])
        if "__dict__" in item:
            return {_hashable(walk(k)): walk(v) for k, v in item["__dict__"]}
        raise ValueError(f"Malformed value message: unknown node {sorted(item)[:3]}")

    return walk(meta.get("value"))


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        raise ValueError("Malformed value message: a dict key is a list")
    return key


def error_text(err: BaseException) -> str:
    """What a worker reports of a step's exception: its type, message and traceback (text only)."""
    return f"{type(err).__name__}: {err}\n" + "".join(traceback.format_exception(err))[-4000:]
