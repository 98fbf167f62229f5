"""The parameter-server wire format: a JSON header, then raw tensor bytes.

``[4-byte big-endian header length][header JSON][tensor bytes ...]``. The header lists each tensor's name, dtype,
shape and byte count, plus a small ``meta`` dict. Decoding validates everything against the bytes received before
any tensor is built: nothing arriving over the network is unpickled, and a malformed message is a ``ValueError``
that says what is wrong.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import torch

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_MAX_HEADER = 1 << 20
_MAX_NDIM = 64


def encode(tensors: dict[str, torch.Tensor], meta: dict[str, Any] | None = None) -> bytes:
    """Serialises ``tensors`` (contiguous CPU copies) and ``meta`` into one message."""
    entries, payloads = [], []
    for name, tensor in tensors.items():
        if tensor.dtype not in _NAMES:
            raise ValueError(f"Unsupported dtype on the wire. Expected one of {sorted(DTYPES)}. Received: {tensor.dtype}")
        # A view of the tensor's bytes: the one copy is the final join.
        data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data if tensor.numel() else b""
        entries.append({"name": name, "dtype": _NAMES[tensor.dtype], "shape": list(tensor.shape), "nbytes": len(data)})
        payloads.append(data)
    header = json.dumps({"tensors": entries, "meta": meta or {}}).encode("utf-8")
    return b"".join([struct.pack(">I", len(header)), header, *payloads])


def header_end(message: bytes) -> int:
    """Where ``message``'s prefix and JSON header end, from the prefix alone; at most ``len(message)``."""
    if len(message) < 4:
        return len(message)
    return min(len(message), 4 + struct.unpack(">I", message[:4])[0])


def decode(message: bytes) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Parses a message from ``encode``; raises ``ValueError`` naming the first problem found."""
    if len(message) < 4:
        raise ValueError(f"Message too short for its header length: {len(message)} bytes")
    (header_length,) = struct.unpack(">I", message[:4])
    if header_length > _MAX_HEADER or 4 + header_length > len(message):
        raise ValueError(f"Header length {header_length} does not fit a message of {len(message)} bytes (truncated?)")
    try:
        header = json.loads(message[4 : 4 + header_length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"Header is not valid JSON: {err}") from None
    if not isinstance(header, dict) or not isinstance(header.get("tensors"), list) or not isinstance(header.get("meta", {}), dict):
        raise ValueError("Header must be an object with a 'tensors' list and a 'meta' object")
    tensors, offset = {}, 4 + header_length
    for entry in header["tensors"]:
        name, dtype, shape, nbytes = _check_entry(entry)
        if offset + nbytes > len(message):
            raise ValueError(f"Tensor {name!r} needs {nbytes} bytes but only {len(message) - offset} remain (truncated)")
        raw = bytearray(memoryview(message)[offset : offset + nbytes])  # one copy: the tensor must be writable
        tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(shape) if nbytes else torch.zeros(shape, dtype=dtype)
        offset += nbytes
    if offset != len(message):
        raise ValueError(f"{len(message) - offset} bytes follow the last tensor: the header does not describe the body")
    return tensors, header.get("meta", {})


def _check_entry(entry: Any) -> tuple[str, torch.dtype, list[int], int]:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"Each tensor entry needs a string 'name'. Received: {str(entry)[:100]}")
    name = entry["name"]
    if entry.get("dtype") not in DTYPES:
        raise ValueError(f"Tensor {name!r}: unknown dtype. Expected one of {sorted(DTYPES)}. Received: {entry.get('dtype')!r}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape):
        raise ValueError(f"Tensor {name!r}: shape must be a list of non-negative ints. Received: {shape!r}")
    # torch computes strides over every dimension, zero-sized ones counted as 1: they must fit in int64.
    if len(shape) > _MAX_NDIM or math.prod(max(d, 1) for d in shape) >= 2**62:
        raise ValueError(f"Tensor {name!r}: shape {shape!r} is too large for a tensor (at most {_MAX_NDIM} "
                         "dimensions whose sizes, zeros counted as 1, multiply to less than 2**62)")
    dtype = DTYPES[entry["dtype"]]
    expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if entry.get("nbytes") != expected:
        raise ValueError(f"Tensor {name!r}: {entry.get('nbytes')!r} bytes declared, but {entry['dtype']}{shape} "
                         f"takes {expected}")
    return name, dtype, shape, expected
