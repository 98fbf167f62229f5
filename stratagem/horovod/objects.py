"""``broadcast_object`` and ``allgather_object``: plain data between the job's processes, never pickled.

Objects travel as the package's value messages (``stratagem.distribute.ps.results``: JSON plus raw tensor bytes) in
uint8 tensors on the job's process group.
"""

from __future__ import annotations

from typing import Any

import torch

from stratagem.distribute.ps import results
from stratagem.horovod import basics, ops
from stratagem.horovod.basics import ProcessSet, global_process_set

__all__ = ["broadcast_object", "allgather_object"]

_FAILED = -1  # a length that tells the peers the sender could not encode its object


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every process (the root gets its own object back).

    Args:
        obj: None, bool, int, float, str, bytes, tensors, NumPy arrays, and lists, tuples and dicts of them. Other types
            raise ``TypeError``: Horovod pickles, but bytes from the network are never unpickled here.
        root_rank: The global rank whose object is sent.
        name: Accepted for Horovod's signature.
        process_set: Limit the broadcast to a registered ``ProcessSet``.

    Raises:
        TypeError: On the root, for an unsupported type; the other ranks then raise ``RuntimeError`` instead of waiting.

    Example:
        >>> state = hvd.broadcast_object({"epoch": epoch}, root_rank=0)  # doctest: +SKIP
    """
    if process_set.size() == 1:
        return obj
    payload, error = _encode(obj) if basics.rank() == root_rank else (b"", None)
    length = torch.tensor([len(payload) if error is None else _FAILED], dtype=torch.int64)
    ops.broadcast_(length, root_rank, process_set=process_set)
    if error is not None:
        raise error
    if int(length.item()) == _FAILED:
        raise RuntimeError(f"[rank {basics.rank()}] broadcast_object: rank {root_rank} could not encode its "
                           "object; its own error says why.")
    data = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload else torch.empty(
        int(length.item()), dtype=torch.uint8)
    ops.broadcast_(data, root_rank, process_set=process_set)
    return obj if basics.rank() == root_rank else results.decode_value(data.numpy().tobytes(), tensors_as_numpy=False)


def allgather_object(obj: Any, name: str | None = None, process_set: ProcessSet = global_process_set) -> list[Any]:
    """Returns every process's ``obj``, in rank order (the types ``broadcast_object`` takes).

    Raises:
        TypeError: On a rank whose object has an unsupported type; the other ranks raise ``RuntimeError`` naming it.

    Example:
        >>> hvd.allgather_object({"rank": hvd.rank()})  # doctest: +SKIP
        [{'rank': 0}, {'rank': 1}]
    """
    payload, error = _encode(obj)
    lengths = ops.allgather(torch.tensor([len(payload) if error is None else _FAILED]), process_set=process_set)
    if error is not None:
        raise error
    failed = [rank for rank, length in zip(process_set._members(), lengths.tolist()) if length == _FAILED]
    if failed:
        raise RuntimeError(f"[rank {basics.rank()}] allgather_object: rank(s) {failed} could not encode their "
                           "object; their own errors say why.")
    data = ops.allgather(torch.frombuffer(bytearray(payload), dtype=torch.uint8), process_set=process_set)
    pieces = data.split(lengths.tolist())
    return [results.decode_value(piece.numpy().tobytes(), tensors_as_numpy=False) for piece in pieces]


def _encode(obj: Any) -> tuple[bytes, Exception | None]:
    try:
        return results.encode_value(obj, what="An object sent by stratagem.horovod"), None
    except (TypeError, ValueError) as err:
        return b"", err
