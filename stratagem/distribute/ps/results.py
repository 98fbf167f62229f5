"""Return values of scheduled steps on the wire: tensors as raw bytes, the rest as JSON.

A step may return tensors, arrays, numbers, strings, None and lists, tuples
and string-keyed dicts of them. Nothing is pickled; ``decode_value`` gives
tensors back as numpy arrays, as ``RemoteValue.fetch`` returns them.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
import torch

from stratagem.distribute.ps import wire


def encode_value(value: Any) -> bytes:
    """Nested lists/tuples/dicts of tensors, arrays, numbers, strings and None, as one wire message."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(item: Any) -> Any:
        if isinstance(item, (torch.Tensor, np.ndarray, np.generic)):
            key = f"t{len(tensors)}"
            tensors[key] = torch.as_tensor(np.asarray(item)) if not isinstance(item, torch.Tensor) else item.detach().cpu()
            return {"__tensor__": key}
        if isinstance(item, tuple):
            return {"__tuple__": [walk(x) for x in item]}
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise TypeError(f"A scheduled function's dict results need string keys. Received keys: {list(item)[:5]}")
            return {"__dict__": {k: walk(v) for k, v in item.items()}}
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        raise TypeError(f"A scheduled function may return tensors, arrays, numbers, strings, None and "
                        f"lists/tuples/dicts of them. Received: {type(item).__name__}")

    return wire.encode(tensors, {"value": walk(value)})


def decode_value(message: bytes) -> Any:
    """The value of ``encode_value``, with tensors as numpy arrays (as ``RemoteValue.fetch`` returns them)."""
    tensors, meta = wire.decode(message)

    def walk(item: Any) -> Any:
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, dict):
            if "__tensor__" in item:
                return tensors[item["__tensor__"]].numpy()
            if "__tuple__" in item:
                return tuple(walk(x) for x in item["__tuple__"])
            return {k: walk(v) for k, v in item["__dict__"].items()}
        return item

    return walk(meta.get("value"))


def error_text(err: BaseException) -> str:
    """What a worker reports of a step's exception: its type, message and traceback (text only)."""
    return f"{type(err).__name__}: {err}\n" + "".join(traceback.format_exception(err))[-4000:]
