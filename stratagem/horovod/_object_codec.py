"""Plain Python data and tensors as bytes, for ``broadcast_object`` and ``allgather_object``: no pickle.

Horovod pickles the object (cloudpickle) and unpickles it on the other ranks.
Unpickling runs whatever code the bytes name, so bytes from the network are
never unpickled here (developers' guide), even though every rank is one of the
job's own processes on the job's process group. Instead an object is a JSON
tree (``None``, bool, int, float, str, list, tuple, dict with such keys)
whose tensors, NumPy arrays and bytes travel as raw bytes in the parameter
server's wire format (``stratagem.distribute.ps.wire``), which validates the
message before it builds any tensor. Anything else is refused with a
``TypeError`` naming its type.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from stratagem.distribute.ps import wire

_SUPPORTED = ("None, bool, int, float, str, bytes, torch tensors, NumPy arrays, and lists, tuples and dicts "
              "of them")


def encode(value: Any) -> bytes:
    """``value`` as one message; raises ``TypeError`` for a type outside the supported ones."""
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
        if isinstance(item, np.ndarray):
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
        raise TypeError(f"stratagem.horovod sends objects without pickle, so it takes {_SUPPORTED}. Convert the "
                        f"object to those (e.g. a dict of its fields). Received: type={type(item).__qualname__}")

    return wire.encode(tensors, {"value": walk(value)})


def decode(message: bytes) -> Any:
    """The value ``encode`` wrote; raises ``ValueError`` for a malformed message."""
    tensors, meta = wire.decode(message)

    def walk(item: Any) -> Any:
        if isinstance(item, list):
            return [walk(x) for x in item]
        if not isinstance(item, dict):
            return item
        if "__tensor__" in item:
            return tensors[item["__tensor__"]]
        if "__ndarray__" in item:
            return tensors[item["__ndarray__"]].numpy()
        if "__bytes__" in item:
            return tensors[item["__bytes__"]].numpy().tobytes()
        if "__tuple__" in item:
            return tuple(walk(x) for x in item["__tuple__"])
        if "__dict__" in item:
            return {_hashable(walk(k)): walk(v) for k, v in item["__dict__"]}
        raise ValueError(f"Malformed object message: unknown node {sorted(item)[:3]}")

    return walk(meta.get("value"))


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        raise ValueError("Malformed object message: a dict key is a list")
    return key
