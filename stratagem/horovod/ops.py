"""Horovod's collective operations (``horovod.torch.mpi_ops``) on torch.distributed.

Every operation has Horovod's name and arguments: ``allreduce``, ``allgather``,
``broadcast``, ``alltoall``, ``reducescatter`` with their ``_async`` and
in-place ``_`` forms, ``grouped_allreduce``, ``barrier``, ``join``, and
``poll``/``synchronize`` for handles. An ``_async`` call starts the torch
collective and returns an integer handle; ``synchronize`` waits (within the
job's timeout) and returns the result.

Differences from Horovod, each for a reason given where it happens:
collectives are matched by the order ranks call them, not by ``name`` (every
rank must call the same collectives in the same order, as with
torch.distributed); ``Adasum`` is not implemented; ``join`` is a barrier that
does not stand in for the collectives of ranks that are still running;
``reducescatter`` all-reduces and keeps this rank's slice, since gloo has no
reduce-scatter. ``allreduce`` (Sum, Average), ``allgather`` and ``broadcast`` are
differentiable, with Horovod's gradients.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from stratagem.distribute import collectives as torch_collectives
from stratagem.horovod import basics
from stratagem.horovod.basics import ProcessSet, global_process_set
from stratagem.horovod.compression import Compression, Compressor

__all__ = [
    "ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "join", "barrier", "poll", "synchronize",
]


class ReduceOp(str, enum.Enum):
    """Reduction of ``allreduce``/``reducescatter``; ``hvd.Average`` and friends are its members."""

    AVERAGE = "average"
    SUM = "sum"
    ADASUM = "adasum"
    MIN = "min"
    MAX = "max"
    PRODUCT = "product"


Average, Sum, Adasum, Min, Max = ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.ADASUM, ReduceOp.MIN, ReduceOp.MAX
Product = ReduceOp.PRODUCT
_TORCH_OPS = {ReduceOp.AVERAGE: dist.ReduceOp.SUM, ReduceOp.SUM: dist.ReduceOp.SUM, ReduceOp.MIN: dist.ReduceOp.MIN,
              ReduceOp.MAX: dist.ReduceOp.MAX, ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT}


@dataclasses.dataclass
class _Pending:
    operation: str
    work: Any  # torch's Work of the last collective started, or None when nothing had to be sent
    finish: Callable[[], Any]  # turns the collective's buffer into the result, after the wait


# NOTE: Horovod hands out integer handles; they index this per-process table until synchronize.
_pending: dict[int, _Pending] = {}
_handle_ids = itertools.count(1)


def _register(operation: str, work: Any, finish: Callable[[], Any]) -> int:
    handle = next(_handle_ids)
    _pending[handle] = _Pending(operation, work, finish)
    return handle


def poll(handle: int) -> bool:
    """Whether the operation behind ``handle`` has finished, so ``synchronize`` would not wait."""
    pending = _lookup(handle)
    return pending.work is None or pending.work.is_completed()


def synchronize(handle: int) -> Any:
    """Waits for the operation behind ``handle`` (within the job's timeout) and returns its result.

    Raises:
        CollectiveTimeoutError: If a peer did not take part within the timeout.
    """
    pending = _lookup(handle)
    del _pending[handle]
    if pending.work is not None:
        timeout_s = basics.timeout_s()
        with torch_collectives.collective_errors(pending.operation, timeout_s=timeout_s):
            pending.work.wait(datetime.timedelta(seconds=timeout_s))
    return pending.finish()


def _lookup(handle: int) -> _Pending:
    if handle not in _pending:
        raise ValueError(f"Handle {handle!r} is unknown: it was synchronized already or never returned by an "
                         "_async operation. Keep each handle and synchronize it once.")
    return _pending[handle]


def _resolve_op(average: bool | None, op: ReduceOp | str | None) -> ReduceOp:
    if average is not None and op is not None:
        raise ValueError(f"Pass op only; average is Horovod's older spelling of it. Received: average={average}, op={op}")
    if op is None:
        return ReduceOp.SUM if average is False else ReduceOp.AVERAGE
    try:
        resolved = ReduceOp(op)
    except ValueError:
        raise ValueError(f"Unknown reduction. Expected one of {[o.value for o in ReduceOp]}. Received: op={op!r}") from None
    if resolved is ReduceOp.ADASUM:
        raise NotImplementedError(
            "hvd.Adasum is not implemented in stratagem.horovod: it needs Horovod's own pairwise "
            "reduction, which torch.distributed does not offer. Use op=hvd.Average (the default) and scale "
            "the learning rate by hvd.size().")
    return resolved


def _scale(tensor: torch.Tensor, factor: float) -> None:
    if factor == 1.0:
        return
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.mul_(factor)
    else:  # integers: Horovod's average of integer tensors rounds down
        tensor.copy_(torch.floor(tensor.double() * factor).to(tensor.dtype))


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: ReduceOp | str | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts an in-place all-reduce of ``tensor``; ``synchronize(handle)`` returns ``tensor`` reduced."""
    reduction = _resolve_op(average, op)
    group, members = basics.group_of(process_set), process_set.size()
    _scale(tensor, prescale_factor)
    work = dist.all_reduce(tensor, op=_TORCH_OPS[reduction], group=group, async_op=True) if members > 1 else None
    # gloo has no average: sum, then divide after the wait.
    divisor = members if reduction is ReduceOp.AVERAGE else 1

    def finish() -> torch.Tensor:
        _scale(tensor, postscale_factor / divisor)
        return tensor

    return _register("allreduce", work, finish)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: ReduceOp | str | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """All-reduces ``tensor`` in place (default: average over the processes) and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: ReduceOp | str | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts an all-reduce of a copy of ``tensor``; ``synchronize(handle)`` returns the copy."""
    return allreduce_async_(tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor, process_set)


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: ReduceOp | str | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns ``tensor`` reduced over the processes (default: their average); ``tensor`` is unchanged.

    Differentiable for ``Sum`` and ``Average``: the gradient is the same
    reduction of the gradients, as in Horovod.

    Args:
        tensor: The local value; every process passes the same shape and dtype.
        average: Horovod's older flag; ``False`` means ``op=Sum``.
        name: Accepted for Horovod's signature; collectives match by call order.
        compression: ``Compression.none`` or ``Compression.fp16`` (sent as float16).
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product``.
        prescale_factor: Multiplies the local value before the reduction.
        postscale_factor: Multiplies the result.
        process_set: Limit the reduction to a registered ``ProcessSet``.

    Returns:
        A new tensor with the reduced value.

    Raises:
        NotImplementedError: For ``op=Adasum``.

    Example:
        >>> hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)  # doctest: +SKIP
        tensor([1.])
    """
    reduction = _resolve_op(average, op)
    if tensor.requires_grad and reduction in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return _DifferentiableAllreduce.apply(tensor, reduction, compression, prescale_factor, postscale_factor,
                                              process_set)
    return _allreduce_compressed(tensor.detach(), reduction, compression, prescale_factor, postscale_factor, process_set)


def _allreduce_compressed(tensor: torch.Tensor, op: ReduceOp, compression: type[Compressor], prescale_factor: float,
                          postscale_factor: float, process_set: ProcessSet) -> torch.Tensor:
    compressed, context = compression.compress(tensor)
    if compressed is tensor:
        compressed = tensor.clone()
    reduced = synchronize(allreduce_async_(compressed, None, None, op, prescale_factor, postscale_factor, process_set))
    return compression.decompress(reduced, context)


class _DifferentiableAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: ReduceOp, compression: type[Compressor], prescale_factor: float,
                postscale_factor: float, process_set: ProcessSet) -> torch.Tensor:
        ctx.arguments = (op, compression, prescale_factor, postscale_factor, process_set)
        return _allreduce_compressed(tensor, op, compression, prescale_factor, postscale_factor, process_set)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # d(sum_j x_j)/dx_i is 1 on every rank, so each rank's gradient is the same reduction of all gradients.
        return (_allreduce_compressed(grad_output, *ctx.arguments), None, None, None, None, None)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                             op: ReduceOp | str | None = None, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> int:
    """Starts one in-place all-reduce of several tensors; ``synchronize`` returns them as a list."""
    tensors = list(tensors)
    by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        by_dtype.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    # One flat buffer per dtype and device: one collective instead of one per tensor (Horovod's fusion).
    buffers = [(group, torch.cat([t.reshape(-1) for t in group])) for group in by_dtype.values()]
    handles = [allreduce_async_(flat, average, name, op, prescale_factor, postscale_factor, process_set)
               for _, flat in buffers]

    def finish() -> list[torch.Tensor]:
        for handle, (group, flat) in zip(handles, buffers):
            synchronize(handle)
            for tensor, piece in zip(group, flat.split([t.numel() for t in group])):
                tensor.copy_(piece.view_as(tensor))
        return tensors

    return _register("grouped_allreduce", None, finish)


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                       op: ReduceOp | str | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """All-reduces several tensors in place, in one collective per dtype; returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                            op: ReduceOp | str | None = None, prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> int:
    """Starts a grouped all-reduce of copies of ``tensors``."""
    return grouped_allreduce_async_([t.detach().clone() for t in tensors], average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: ReduceOp | str | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Returns each of ``tensors`` reduced over the processes, sent together; the inputs are unchanged."""
    compressed = [compression.compress(t.detach()) for t in tensors]
    reduced = grouped_allreduce_([c.clone() for c, _ in compressed], average, name, op, prescale_factor,
                                 postscale_factor, process_set)
    return [compression.decompress(r, context) for r, (_, context) in zip(reduced, compressed)]


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts an all-gather; ``synchronize`` returns the tensors of every rank concatenated on axis 0."""
    tensor = tensor.detach().reshape(1) if tensor.dim() == 0 else tensor.detach()
    group, members = basics.group_of(process_set), process_set.size()
    if members == 1:
        return _register("allgather", None, tensor.clone)
    # Ranks may hold different numbers of rows (Horovod allows it) but torch gathers equal
    # shapes: exchange the row counts, pad to the largest, cut the padding off after.
    shapes = _exchange_shapes(tensor, group, members)
    rows = [shape[0] for shape in shapes]
    if any(shape[1:] != shapes[0][1:] for shape in shapes):
        raise ValueError(f"allgather concatenates on axis 0, so all other dimensions must agree across ranks. "
                         f"Received: shapes by rank={shapes}")
    padded = torch.zeros((max(rows), *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    padded[: tensor.shape[0]] = tensor
    gathered = [torch.empty_like(padded) for _ in range(members)]
    work = dist.all_gather(gathered, padded, group=group, async_op=True)
    return _register("allgather", work, lambda: torch.cat([g[:n] for g, n in zip(gathered, rows)]))


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along axis 0, in rank order; row counts may differ by rank.

    Example:
        >>> hvd.allgather(torch.tensor([hvd.rank()]))  # doctest: +SKIP
        tensor([0, 1])
    """
    if tensor.requires_grad:
        return _DifferentiableAllgather.apply(tensor, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


class _DifferentiableAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, process_set: ProcessSet) -> torch.Tensor:
        ctx.rows, ctx.process_set = tensor.shape[0] if tensor.dim() else 1, process_set
        return synchronize(allgather_async(tensor, None, process_set))

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # As Horovod: the ranks' gradients of the gathered tensor are averaged, and each rank
        # takes the rows it contributed.
        reduced = synchronize(allreduce_async_(grad_output.contiguous().clone(), op=Average,
                                               process_set=ctx.process_set))
        rows = allgather(torch.tensor([ctx.rows]), process_set=ctx.process_set).tolist()
        offset = sum(rows[: ctx.process_set.rank()])
        return reduced[offset : offset + ctx.rows], None


def _exchange_shapes(tensor: torch.Tensor, group: dist.ProcessGroup | None, members: int) -> list[list[int]]:
    # A fixed-length record (ndim, then the dims) so that ranks of different ndim can still compare.
    if tensor.dim() > 15:
        raise ValueError(f"At most 15 dimensions are supported. Received: ndim={tensor.dim()}")
    record = torch.zeros(16, dtype=torch.int64, device=tensor.device)
    record[0] = tensor.dim()
    record[1 : 1 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    records = [torch.empty_like(record) for _ in range(members)]
    with torch_collectives.collective_errors("allgather", timeout_s=basics.timeout_s()):
        dist.all_gather(records, record, group=group)
    return [r[1 : 1 + int(r[0])].tolist() for r in records]


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts an in-place broadcast of root's ``tensor``; ``synchronize`` returns ``tensor``."""
    group, members = basics.group_of(process_set), process_set.size()
    _check_root(root_rank, process_set)
    work = dist.broadcast(tensor, src=root_rank, group=group, async_op=True) if members > 1 else None
    return _register("broadcast", work, lambda: tensor)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts a broadcast into a copy of ``tensor``."""
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank (a new tensor; ``root_rank`` is a global rank).

    Example:
        >>> hvd.broadcast(torch.tensor([hvd.rank()]), root_rank=1)  # doctest: +SKIP
        tensor([1])
    """
    if tensor.requires_grad:
        return _DifferentiableBroadcast.apply(tensor, root_rank, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


class _DifferentiableBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, process_set: ProcessSet) -> torch.Tensor:
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, None, process_set))

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # As Horovod: only the root's value was used, so it gets the ranks' averaged gradient; the others none.
        reduced = synchronize(allreduce_async_(grad_output.contiguous().clone(), op=Average,
                                               process_set=ctx.process_set))
        return (reduced if basics.rank() == ctx.root_rank else torch.zeros_like(reduced)), None, None


def _check_root(root_rank: int, process_set: ProcessSet) -> None:
    if root_rank not in process_set._members():
        raise ValueError(f"root_rank must be a (global) rank of the processes taking part, "
                         f"{process_set._members()}. Received: root_rank={root_rank}")


def alltoall_async(tensor: torch.Tensor, splits: Sequence[int] | torch.Tensor | None = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Starts an all-to-all; ``synchronize`` returns what ``alltoall`` returns."""
    group, members = basics.group_of(process_set), process_set.size()
    tensor = tensor.detach().contiguous()
    send = _alltoall_splits(tensor, splits, members)
    if members == 1:
        return _register("alltoall", None, lambda: (tensor.clone(), torch.tensor(send)))
    # Each rank first learns how many rows every other rank sends it, to size its output.
    received = torch.empty(members, dtype=torch.int64, device=tensor.device)
    with torch_collectives.collective_errors("alltoall", timeout_s=basics.timeout_s()):
        dist.all_to_all_single(received, torch.tensor(send, dtype=torch.int64, device=tensor.device), group=group)
    counts = received.tolist()
    output = torch.empty((sum(counts), *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    work = dist.all_to_all_single(output, tensor, output_split_sizes=counts, input_split_sizes=send, group=group,
                                  async_op=True)
    return _register("alltoall", work, lambda: (output, received.cpu()))


def alltoall(tensor: torch.Tensor, splits: Sequence[int] | torch.Tensor | None = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Sends ``splits[j]`` rows of ``tensor`` to rank j, and returns the rows received, in rank order.

    Args:
        tensor: Rows to scatter along axis 0.
        splits: Rows for each rank; default: an equal share (axis 0 must divide).

    Returns:
        The received rows; with ``splits`` given, also the rows received from
        each rank, as Horovod returns them.
    """
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return (output, received) if splits is not None else output


def _alltoall_splits(tensor: torch.Tensor, splits: Sequence[int] | torch.Tensor | None, members: int) -> list[int]:
    rows = tensor.shape[0] if tensor.dim() else 0
    if splits is None:
        if rows % members:
            raise ValueError(f"Without splits, alltoall sends an equal share of axis 0 to each of the {members} "
                             f"ranks, so it must divide. Pass splits=[...]. Received: shape={list(tensor.shape)}")
        return [rows // members] * members
    send = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
    if len(send) != members or any(s < 0 for s in send) or sum(send) != rows:
        raise ValueError(f"splits needs one non-negative row count per rank ({members}), summing to the "
                         f"{rows} rows of tensor. Received: splits={send}")
    return send


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, compression: type[Compressor] = Compression.none,
                        op: ReduceOp | str = Average, process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts a reduce-scatter; ``synchronize`` returns this rank's rows of the reduced tensor."""
    members, index = process_set.size(), process_set.rank()
    compressed, context = compression.compress(tensor.detach())
    buffer = compressed.clone()
    # NOTE: gloo has no reduce-scatter, so every rank all-reduces the whole tensor and keeps its slice.
    handle = allreduce_async_(buffer, None, name, op, prescale_factor, postscale_factor, process_set)
    # Horovod's split: equal shares of axis 0, the first ranks taking one extra row when it does not divide.
    share, extra = divmod(buffer.shape[0], members)
    start = index * share + min(index, extra)
    stop = start + share + (1 if index < extra else 0)

    def finish() -> torch.Tensor:
        return compression.decompress(synchronize(handle)[start:stop].clone(), context)

    return _register("reducescatter", None, finish)


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression: type[Compressor] = Compression.none,
                  op: ReduceOp | str = Average, process_set: ProcessSet = global_process_set,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over the processes and returns this rank's share of axis 0 (rank order)."""
    return synchronize(reducescatter_async(tensor, name, compression, op, process_set, prescale_factor,
                                           postscale_factor))


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Waits (within the job's timeout) until every process of ``process_set`` has reached it."""
    group, members = basics.group_of(process_set), process_set.size()
    if members > 1:
        with torch_collectives.collective_errors("barrier", timeout_s=basics.timeout_s()):
            dist.barrier(group=group)


def join(device: int = -1) -> int:
    """Waits until every process has called ``join``; returns the rank that joined last.

    NOTE: unlike Horovod, a joined rank does not stand in (with zeros) for the
    collectives that ranks still training issue: torch.distributed matches
    collectives by call order and has no coordinator to do it. Give every rank
    the same number of steps (``DistributedSampler``, ``drop_last``) before
    calling ``join``; a mismatch fails at the job's timeout.
    """
    if basics.size() == 1:
        return 0
    timeout_s = basics.timeout_s()
    store = torch_collectives._store  # the rendezvous store: it sees arrival order, which no collective does
    arrived = -1
    if store is not None:
        _join_calls[0] += 1
        arrived = store.add(f"stratagem/horovod/join/{_join_calls[0]}", 1)
    last = torch.tensor([basics.rank() if arrived == basics.size() else -1])
    with torch_collectives.collective_errors("join", timeout_s=timeout_s):
        dist.all_reduce(last, op=dist.ReduceOp.MAX)
    # Without our store (a group started elsewhere) nobody knows the order: report the highest rank.
    return int(last.item()) if int(last.item()) >= 0 else basics.size() - 1


_join_calls = [0]  # every rank joins as often, so the n-th join uses the same store key everywhere
