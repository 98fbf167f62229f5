"""Horovod's collective operations (``horovod.torch.mpi_ops``) on torch.distributed.

Each operation has Horovod's name, arguments, ``_async`` and in-place ``_`` forms, and gradients; grouped and sparse
forms live in ``grouped``, handles in ``_handles``. Each is checked against the other ranks before its data moves
(``_negotiation``): a mismatch raises ``HorovodInternalError`` on every rank. Differences from Horovod: calls without a
``name`` (and grouped, ``alltoall`` and ``barrier`` calls) match by call order, as in torch.distributed; a named call
waits until every rank has issued its name (at most 4 waiting per rank); ``Adasum`` is not implemented.
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from stratagem.distribute import collectives as torch_collectives
from stratagem.horovod import _handles, _negotiation, basics
from stratagem.horovod._handles import poll, synchronize
from stratagem.horovod._negotiation import Call, Kind
from stratagem.horovod.basics import ProcessSet, global_process_set
from stratagem.horovod.compression import Compression, Compressor

__all__ = [
    "ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
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
_OP_CODES = list(ReduceOp)
_WIRE_OP = {ReduceOp.AVERAGE: 0, ReduceOp.SUM: 0, ReduceOp.MIN: 1, ReduceOp.MAX: 2, ReduceOp.PRODUCT: 3}

# What an operation starts: the torch Work objects, and the function that builds its result after them.
Started = tuple[list[Any], Callable[[], Any]]


def check_tensor(operation: str, tensor: Any) -> None:
    """Refuses what is not a tensor with a message naming the operation (not an AttributeError deep inside)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"hvd.{operation} takes a torch.Tensor. Received: type={type(tensor).__name__}. Convert it "
                        "first, e.g. torch.tensor(values).")


def resolve_op(average: bool | None, op: ReduceOp | str | None) -> ReduceOp:
    if average is not None and op is not None:
        raise ValueError(f"Pass op only; average is Horovod's older spelling of it. Received: average={average}, op={op}")
    if op is None:
        return ReduceOp.SUM if average is False else ReduceOp.AVERAGE
    try:
        resolved = ReduceOp(op)
    except ValueError:
        raise ValueError(f"Unknown reduction. Expected one of {[o.value for o in ReduceOp]}. Received: op={op!r}") from None
    if resolved is ReduceOp.ADASUM:
        raise NotImplementedError("hvd.Adasum is not implemented in stratagem.horovod: it needs Horovod's own pairwise "
                                  "reduction, which torch.distributed does not offer. Use op=hvd.Average (the default) "
                                  "and scale the learning rate by hvd.size().")
    return resolved


def _scale(tensor: torch.Tensor, factor: float) -> None:
    if factor == 1.0:
        return
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.mul_(factor)
    else:  # integers: Horovod scales in float64 and converts back, truncating toward zero
        tensor.copy_((tensor.double() * factor).trunc().to(tensor.dtype))


def _to_wire(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, or a widened copy when gloo lacks its dtype."""
    wire = _negotiation.wire_dtype(tensor.dtype)
    return tensor if wire is tensor.dtype else tensor.to(wire)


def _from_wire(wire: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, holding the result that arrived in ``wire`` (its widened copy, or itself)."""
    if wire is not tensor:
        tensor.copy_(wire)
    return tensor


def start_allreduce(tensor: torch.Tensor, op: ReduceOp, *, prescale_factor: float, postscale_factor: float,
                    process_set: ProcessSet, checked: bool = False) -> Started:
    """Checks ``tensor`` with the other ranks (unless ``checked`` already) and starts its all-reduce in place."""
    group, members = basics.group_of(process_set), process_set.size()
    if members > 1 and not checked:
        _negotiation.negotiate(_reduction_call(Kind.ALLREDUCE, tensor, op), group, members)
    wire = _to_wire(tensor)
    _scale(wire, prescale_factor)
    work = (dist.all_reduce(wire, op=_negotiation.WIRE_OPS[_WIRE_OP[op]], group=group, async_op=True)
            if members > 1 else None)

    def finish() -> torch.Tensor:
        # gloo has no average: sum, then scale by postscale / size after the wait, as Horovod's gloo path
        # does (integers in float64, truncated toward zero: an average of -7 and 0 is -3).
        _scale(wire, postscale_factor / (members if op is ReduceOp.AVERAGE else 1))
        return _from_wire(wire, tensor)

    return [work], finish


def _reduction_call(kind: Kind, tensor: torch.Tensor, op: ReduceOp) -> Call:
    return Call(kind, tensor.dtype, tuple(tensor.shape), op=_OP_CODES.index(op), wire_op=_WIRE_OP[op])


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: ReduceOp | str | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts an in-place all-reduce of ``tensor``; ``synchronize(handle)`` returns it (``name``: matched by name)."""
    check_tensor("allreduce", tensor)
    reduction = resolve_op(average, op)
    return _handles.start_named(
        "allreduce", name, _reduction_call(Kind.ALLREDUCE, tensor, reduction), process_set,
        lambda _: start_allreduce(tensor, reduction, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set, checked=True))


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: ReduceOp | str | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """All-reduces ``tensor`` in place (default: average over the processes) and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: ReduceOp | str | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts an all-reduce of a copy of ``tensor``; ``synchronize(handle)`` returns the copy."""
    check_tensor("allreduce_async", tensor)
    return allreduce_async_(tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor, process_set)


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: ReduceOp | str | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns ``tensor`` reduced over the processes (default: their average); ``tensor`` is unchanged.

    Differentiable for ``Sum`` and ``Average``: the gradient is the same reduction of the gradients.

    Args:
        tensor: The local value; every process passes the same shape and dtype.
        average: Horovod's older flag; ``False`` means ``op=Sum``.
        name: Must not be the name of an operation still in flight; collectives match by call order.
        compression: ``Compression.none`` or ``Compression.fp16`` (sent as float16).
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product``.
        prescale_factor: Multiplies the local value before the reduction.
        postscale_factor: Multiplies the result.
        process_set: Limit the reduction to a registered ``ProcessSet``.

    Returns:
        A new tensor with the reduced value.

    Raises:
        HorovodInternalError: On every rank, if the ranks passed different shapes or dtypes.
        NotImplementedError: For ``op=Adasum``.

    Example:
        >>> hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)  # doctest: +SKIP
        tensor([1.])
    """
    check_tensor("allreduce", tensor)
    reduction = resolve_op(average, op)
    if tensor.requires_grad and reduction in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return _DifferentiableAllreduce.apply(tensor, reduction, compression, prescale_factor, postscale_factor,
                                              process_set)
    return _allreduce_compressed(tensor.detach(), reduction, compression, prescale_factor, postscale_factor,
                                 process_set, name)


def _allreduce_compressed(tensor: torch.Tensor, op: ReduceOp, compression: type[Compressor], prescale_factor: float,
                          postscale_factor: float, process_set: ProcessSet, name: str | None = None) -> torch.Tensor:
    compressed, context = compression.compress(tensor)
    if compressed is tensor:
        compressed = tensor.clone()
    reduced = synchronize(allreduce_async_(compressed, None, name, op, prescale_factor, postscale_factor,
                                           process_set))
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


def start_allgather(tensor: torch.Tensor, process_set: ProcessSet, calls: list[Call] | None = None) -> Started:
    """Checks ``tensor`` with the other ranks (unless ``calls``, their checked records) and starts its all-gather."""
    tensor = tensor.detach().reshape(1) if tensor.dim() == 0 else tensor.detach()
    group, members = basics.group_of(process_set), process_set.size()
    if members == 1:
        return [], tensor.clone
    if calls is None:
        calls = _negotiation.negotiate(Call(Kind.ALLGATHER, tensor.dtype, tuple(tensor.shape)), group, members)
        assert calls is not None
    # Ranks may hold different numbers of rows (Horovod allows it) but torch gathers equal
    # shapes: pad to the largest (the checked records carry every rank's rows), cut after.
    rows = [call.shape[0] for call in calls]
    padded = torch.zeros((max(rows), *tensor.shape[1:]), dtype=_negotiation.wire_dtype(tensor.dtype),
                         device=tensor.device)
    padded[: tensor.shape[0]] = tensor
    gathered = [torch.empty_like(padded) for _ in range(members)]
    work = dist.all_gather(gathered, padded, group=group, async_op=True)
    return [work], lambda: torch.cat([g[:n] for g, n in zip(gathered, rows)]).to(tensor.dtype)


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts an all-gather; ``synchronize`` returns the tensors of every rank concatenated on axis 0."""
    check_tensor("allgather_async", tensor)
    call = Call(Kind.ALLGATHER, tensor.dtype, (1,) if tensor.dim() == 0 else tuple(tensor.shape))
    return _handles.start_named("allgather", name, call, process_set,
                                lambda calls: start_allgather(tensor, process_set, calls))


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along axis 0, in rank order; row counts may differ by rank.

    Raises:
        HorovodInternalError: On every rank, if dtypes or dimensions beyond axis 0 differ between ranks.

    Example:
        >>> hvd.allgather(torch.tensor([hvd.rank()]))  # doctest: +SKIP
        tensor([0, 1])
    """
    check_tensor("allgather", tensor)
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
        # As Horovod 0.28: the ranks' gradients of the gathered tensor are averaged, and each rank
        # takes the rows it contributed.
        reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        rows = allgather(torch.tensor([ctx.rows]), process_set=ctx.process_set).tolist()
        offset = sum(rows[: ctx.process_set.rank()])
        return reduced[offset : offset + ctx.rows], None


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts an in-place broadcast of root's ``tensor``; ``synchronize`` returns ``tensor``."""
    check_tensor("broadcast", tensor)
    call = Call(Kind.BROADCAST, tensor.dtype, tuple(tensor.shape), root=root_rank)

    def start(_: list[Call]) -> Started:
        _check_root(root_rank, process_set)  # after the ranks agree, so every rank refuses a root alike
        wire = _to_wire(tensor)
        work = (dist.broadcast(wire, src=root_rank, group=basics.group_of(process_set), async_op=True)
                if process_set.size() > 1 else None)
        return [work], lambda: _from_wire(wire, tensor)

    return _handles.start_named("broadcast", name, call, process_set, start)


def _check_root(root_rank: int, process_set: ProcessSet) -> None:
    if root_rank not in process_set._members():
        raise ValueError(f"root_rank must be a (global) rank of the processes taking part, "
                         f"{process_set._members()}. Received: root_rank={root_rank}")


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts a broadcast into a copy of ``tensor``."""
    check_tensor("broadcast_async", tensor)
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank (a new tensor; ``root_rank`` is a global rank).

    Raises:
        HorovodInternalError: On every rank, if the ranks passed different shapes, dtypes or roots.

    Example:
        >>> hvd.broadcast(torch.tensor([hvd.rank()]), root_rank=1)  # doctest: +SKIP
        tensor([1])
    """
    check_tensor("broadcast", tensor)
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
        reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        return (reduced if basics.rank() == ctx.root_rank else torch.zeros_like(reduced)), None, None


def alltoall_async(tensor: torch.Tensor, splits: Sequence[int] | torch.Tensor | None = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Starts an all-to-all; ``synchronize`` returns ``(output, received_splits)``."""
    check_tensor("alltoall", tensor)
    _handles.check_name("alltoall", name)
    group, members = basics.group_of(process_set), process_set.size()
    tensor = tensor.detach().contiguous()
    send = _alltoall_splits(tensor, splits, members)
    if members == 1:
        return _handles.register("alltoall", [], lambda: (tensor.clone(), torch.tensor(send, dtype=torch.int32)))
    _negotiation.negotiate(Call(Kind.ALLTOALL, tensor.dtype, tuple(tensor.shape)), group, members)
    # Each rank first learns how many rows every other rank sends it, to size its output.
    received = torch.empty(members, dtype=torch.int64, device=tensor.device)
    with torch_collectives.collective_errors("alltoall", timeout_s=basics.timeout_s()):
        dist.all_to_all_single(received, torch.tensor(send, dtype=torch.int64, device=tensor.device), group=group)
    counts = received.tolist()
    wire = _to_wire(tensor)
    output = torch.empty((sum(counts), *tensor.shape[1:]), dtype=wire.dtype, device=tensor.device)
    work = dist.all_to_all_single(output, wire, output_split_sizes=counts, input_split_sizes=send, group=group,
                                  async_op=True)
    return _handles.register("alltoall", [work], lambda: (output.to(tensor.dtype), received.to(torch.int32).cpu()),
                             name)


def alltoall(tensor: torch.Tensor, splits: Sequence[int] | torch.Tensor | None = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Sends ``splits[j]`` rows of ``tensor`` to rank j, and returns the rows received, in rank order.

    Differentiable: the gradient goes back along the received splits, as in Horovod.

    Args:
        tensor: Rows to scatter along axis 0.
        splits: Rows for each rank (integers); default: an equal share (axis 0 must divide).

    Returns:
        The received rows; with ``splits`` given, also the rows received from
        each rank (int32), as Horovod 0.28 returns them.

    Raises:
        ValueError: For splits that are not integers, or do not cover axis 0.
        HorovodInternalError: On every rank, if dtypes or dimensions beyond axis 0 differ between ranks.
    """
    check_tensor("alltoall", tensor)
    if tensor.requires_grad:
        output, received = _DifferentiableAlltoall.apply(tensor, splits, process_set)
    else:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return (output, received) if splits is not None else output


class _DifferentiableAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, process_set: ProcessSet) -> tuple[torch.Tensor, ...]:
        output, received = synchronize(alltoall_async(tensor, splits, None, process_set))
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor, _: Any) -> tuple[torch.Tensor | None, ...]:
        # Row i of the output came from row j of some rank's input: sending the gradients back
        # along the received splits returns each to the rank and row it came from.
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received, None, ctx.process_set))
        return grad, None, None


def _alltoall_splits(tensor: torch.Tensor, splits: Sequence[int] | torch.Tensor | None, members: int) -> list[int]:
    rows = tensor.shape[0] if tensor.dim() else 0
    if splits is None:
        if rows % members:
            raise ValueError(f"Without splits, alltoall sends an equal share of axis 0 to each of the {members} "
                             f"ranks, so it must divide. Pass splits=[...]. Received: shape={list(tensor.shape)}")
        return [rows // members] * members
    if isinstance(splits, torch.Tensor) and (splits.is_floating_point() or splits.is_complex()):
        raise ValueError(f"alltoall splits must hold integers (Horovod takes int32). Received: dtype={splits.dtype}")
    send = splits.tolist() if isinstance(splits, torch.Tensor) else list(splits)
    if not all(isinstance(s, numbers.Integral) for s in send):
        raise ValueError(f"alltoall splits must be integers (row counts). Received: splits={send}")
    send = [int(s) for s in send]
    if len(send) != members or any(s < 0 for s in send) or sum(send) != rows:
        raise ValueError(f"splits needs one non-negative integer row count per rank ({members}), summing to the "
                         f"{rows} rows of tensor. Received: splits={send}")
    return send


def start_reducescatter(tensor: torch.Tensor, op: ReduceOp, *, prescale_factor: float, postscale_factor: float,
                        process_set: ProcessSet, checked: bool = False) -> Started:
    """Checks ``tensor`` with the other ranks (unless ``checked`` already) and starts its reduce-scatter."""
    group, members, index = basics.group_of(process_set), process_set.size(), process_set.rank()
    rows = tensor.shape[0] if tensor.dim() else 0
    # Horovod's split: equal shares of axis 0, the first ranks taking one extra row when it does not divide.
    share, extra = divmod(rows, members)
    counts = [share + (1 if i < extra else 0) for i in range(members)]
    if members == 1:
        buffer = tensor.detach().clone()
        _scale(buffer, prescale_factor * postscale_factor)
        return [], lambda: buffer
    if not checked:
        _negotiation.negotiate(_reduction_call(Kind.REDUCESCATTER, tensor, op), group, members)
    wire = _to_wire(tensor.detach()).clone()
    _scale(wire, prescale_factor)
    # gloo's reduce_scatter takes one equal-sized piece per rank: pad each share to the largest.
    pieces = list(wire.split(counts))
    pieces = [torch.cat([p, p.new_zeros((counts[0] - p.shape[0], *p.shape[1:]))]) for p in pieces]
    output = torch.empty_like(pieces[0])
    work = dist.reduce_scatter(output, pieces, op=_negotiation.WIRE_OPS[_WIRE_OP[op]], group=group, async_op=True)

    def finish() -> torch.Tensor:
        result = output[: counts[index]]
        _scale(result, postscale_factor / (members if op is ReduceOp.AVERAGE else 1))  # as allreduce's
        return result.to(tensor.dtype)

    return [work], finish


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, compression: type[Compressor] = Compression.none,
                        op: ReduceOp | str = Average, process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts a reduce-scatter; ``synchronize`` returns this rank's rows of the reduced tensor."""
    check_tensor("reducescatter", tensor)
    compressed, context = compression.compress(tensor.detach())
    reduction = resolve_op(None, op)

    def start(_: list[Call]) -> Started:
        works, finish = start_reducescatter(compressed, reduction, prescale_factor=prescale_factor,
                                            postscale_factor=postscale_factor, process_set=process_set, checked=True)
        return works, lambda: compression.decompress(finish(), context)

    return _handles.start_named("reducescatter", name, _reduction_call(Kind.REDUCESCATTER, compressed, reduction),
                                process_set, start)


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression: type[Compressor] = Compression.none,
                  op: ReduceOp | str = Average, process_set: ProcessSet = global_process_set,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over the processes and returns this rank's share of axis 0 (rank order).

    Differentiable for ``Sum`` and ``Average``: the gradient is the all-gather of the shares' gradients (times the
    process count for ``Sum``), as in Horovod.

    Raises:
        HorovodInternalError: On every rank, if the ranks passed different shapes or dtypes.
    """
    check_tensor("reducescatter", tensor)
    reduction = resolve_op(None, op)
    if tensor.requires_grad and reduction in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return _DifferentiableReducescatter.apply(tensor, reduction, compression, process_set, prescale_factor,
                                                  postscale_factor)
    return synchronize(reducescatter_async(tensor, name, compression, reduction, process_set, prescale_factor,
                                           postscale_factor))


class _DifferentiableReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: ReduceOp, compression: type[Compressor],
                process_set: ProcessSet, prescale_factor: float, postscale_factor: float) -> torch.Tensor:
        ctx.op, ctx.process_set, ctx.scale = op, process_set, prescale_factor * postscale_factor
        return synchronize(reducescatter_async(tensor, None, compression, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # Horovod's rule: gather the shares' gradients; a Sum counted every rank's input once per rank.
        factor = ctx.scale * (ctx.process_set.size() if ctx.op is ReduceOp.SUM else 1)
        return (allgather(grad_output.contiguous() * factor, process_set=ctx.process_set),
                None, None, None, None, None)


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Waits (within the job's timeout) until every process of ``process_set`` has reached it."""
    group, members = basics.group_of(process_set), process_set.size()
    if members > 1:
        _negotiation.negotiate(Call(Kind.BARRIER), group, members)
        with torch_collectives.collective_errors("barrier", timeout_s=basics.timeout_s()):
            dist.barrier(group=group)


def join(device: int = -1) -> int:
    """Marks this rank done; until every rank has joined, it stands in for the others' all-reduces.

    As in Horovod: a joined rank adds zeros to the all-reduces (plain, grouped, ``DistributedOptimizer``'s) of ranks
    still training, so uneven batch counts need no padding; ``Average`` still divides by the full size. Other
    collectives issued meanwhile raise ``HorovodInternalError``.

    Args:
        device: Horovod's GPU argument; unused (gloo and NCCL need none).

    Returns:
        The rank that joined last.
    """
    if basics.size() == 1:
        return 0
    return _negotiation.join()
