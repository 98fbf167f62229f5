"""Horovod's grouped and sparse operations: several tensors under one handle.

``grouped_allreduce`` sends one flat buffer per dtype (Horovod's fusion); ``grouped_allgather`` and
``grouped_reducescatter`` run one collective per tensor under one handle; ``sparse_allreduce_async`` all-gathers indices
and values, as Horovod does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from stratagem.distribute import collectives
from stratagem.horovod import _handles, ops
from stratagem.horovod._handles import synchronize
from stratagem.horovod.basics import ProcessSet, global_process_set
from stratagem.horovod.compression import Compression, Compressor
from stratagem.horovod.ops import ReduceOp

__all__ = [
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "grouped_allgather", "grouped_allgather_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async",
]


def _check_tensors(operation: str, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, Sequence):
        raise TypeError(f"hvd.{operation} takes a list of torch.Tensor. Received: type={type(tensors).__name__}")
    for tensor in tensors:
        ops.check_tensor(operation, tensor)
    return list(tensors)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                             op: ReduceOp | str | None = None, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> int:
    """Starts one in-place all-reduce of several tensors; ``synchronize`` returns them as a list."""
    tensors = _check_tensors("grouped_allreduce", tensors)
    _handles.check_name("grouped_allreduce", name)
    reduction = ops.resolve_op(average, op)
    by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        by_dtype.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    # One flat buffer per dtype and device: one collective instead of one per tensor (Horovod's fusion).
    buffers = [(group, collectives.flatten(group)) for group in by_dtype.values()]
    started = [ops.start_allreduce(flat, reduction, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, process_set=process_set) for _, flat in buffers]

    def finish() -> list[torch.Tensor]:
        for (_, finish_one), (group, flat) in zip(started, buffers):
            collectives.unflatten_into(finish_one(), group)
        return tensors

    return _handles.register("grouped_allreduce", [w for works, _ in started for w in works], finish, name)


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
    copies = [t.detach().clone() for t in _check_tensors("grouped_allreduce_async", tensors)]
    return grouped_allreduce_async_(copies, average, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: ReduceOp | str | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Returns each of ``tensors`` reduced over the processes, sent together; the inputs are unchanged.

    Differentiable for ``Sum`` and ``Average``: each gradient is the same grouped reduction of the gradients.
    """
    tensors = _check_tensors("grouped_allreduce", tensors)
    reduction = ops.resolve_op(average, op)
    arguments = (reduction, compression, prescale_factor, postscale_factor, process_set)
    if any(t.requires_grad for t in tensors) and reduction in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return list(_DifferentiableGroupedAllreduce.apply(arguments, *tensors))
    return _grouped_compressed(tensors, *arguments)


def _grouped_compressed(tensors: list[torch.Tensor], op: ReduceOp, compression: type[Compressor],
                        prescale_factor: float, postscale_factor: float,
                        process_set: ProcessSet) -> list[torch.Tensor]:
    compressed = [compression.compress(t.detach()) for t in tensors]
    reduced = grouped_allreduce_([c.clone() for c, _ in compressed], None, None, op, prescale_factor,
                                 postscale_factor, process_set)
    return [compression.decompress(r, context) for r, (_, context) in zip(reduced, compressed)]


class _DifferentiableGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, arguments: tuple[Any, ...], *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.arguments = arguments
        return tuple(_grouped_compressed(list(tensors), *arguments))

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # As for one tensor: each rank's gradient is the same reduction of every rank's gradient.
        return (None, *_grouped_compressed([g.contiguous() for g in grad_outputs], *ctx.arguments))


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts an all-gather of each tensor; ``synchronize`` returns the gathered tensors as a list."""
    tensors = _check_tensors("grouped_allgather", tensors)
    _handles.check_name("grouped_allgather", name)
    started = [ops.start_allgather(t, process_set) for t in tensors]
    return _handles.register("grouped_allgather", [w for works, _ in started for w in works],
                             lambda: [finish() for _, finish in started], name)


def grouped_allgather(tensors: Sequence[torch.Tensor], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Concatenates every rank's tensors, each along axis 0 in rank order (Horovod's ``grouped_allgather``).

    Differentiable, as ``allgather``, with one grouped all-reduce of the gradients.
    """
    tensors = _check_tensors("grouped_allgather", tensors)
    if any(t.requires_grad for t in tensors):
        return list(_DifferentiableGroupedAllgather.apply(process_set, *tensors))
    return synchronize(grouped_allgather_async(tensors, name, process_set))


class _DifferentiableGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, process_set: ProcessSet, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.rows, ctx.process_set = [t.shape[0] if t.dim() else 1 for t in tensors], process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), None, process_set)))

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # Horovod's rule: average the gathered gradients over the ranks, keep the rows this rank sent.
        reduced = grouped_allreduce([g.contiguous() for g in grad_outputs], op=ops.Average,
                                    process_set=ctx.process_set)
        # Every rank's row count of every tensor, in one all-gather: (members, tensors).
        rows = ops.allgather(torch.tensor([ctx.rows]), process_set=ctx.process_set)
        offsets = rows[: ctx.process_set.rank()].sum(dim=0).tolist()
        return (None, *(r[o : o + n] for r, o, n in zip(reduced, offsets, ctx.rows)))


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                                compression: type[Compressor] = Compression.none, op: ReduceOp | str = ops.Average,
                                process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Starts a reduce-scatter of each tensor; ``synchronize`` returns this rank's shares as a list."""
    tensors = _check_tensors("grouped_reducescatter", tensors)
    _handles.check_name("grouped_reducescatter", name)
    reduction = ops.resolve_op(None, op)
    compressed = [compression.compress(t.detach()) for t in tensors]
    started = [ops.start_reducescatter(c, reduction, prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor, process_set=process_set)
               for c, _ in compressed]

    def finish() -> list[torch.Tensor]:
        return [compression.decompress(finish_one(), context)
                for (_, finish_one), (_, context) in zip(started, compressed)]

    return _handles.register("grouped_reducescatter", [w for works, _ in started for w in works], finish, name)


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: ReduceOp | str = ops.Average,
                          process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reduces each tensor over the processes and returns this rank's share of each (Horovod's split).

    Differentiable for ``Sum`` and ``Average``, as ``reducescatter``, with one grouped all-gather of the gradients.
    """
    tensors = _check_tensors("grouped_reducescatter", tensors)
    reduction = ops.resolve_op(None, op)
    arguments = (compression, reduction, process_set, prescale_factor, postscale_factor)
    if any(t.requires_grad for t in tensors) and reduction in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return list(_DifferentiableGroupedReducescatter.apply(arguments, *tensors))
    return synchronize(grouped_reducescatter_async(tensors, name, *arguments))


class _DifferentiableGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, arguments: tuple[Any, ...], *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _, op, ctx.process_set, prescale_factor, postscale_factor = arguments
        ctx.factor = prescale_factor * postscale_factor * (ctx.process_set.size() if op is ReduceOp.SUM else 1)
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), None, *arguments)))

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gathered = grouped_allgather([g.contiguous() * ctx.factor for g in grad_outputs], process_set=ctx.process_set)
        return (None, *gathered)


def sparse_allreduce_async(tensor: torch.Tensor, name: str | None, op: ReduceOp | str,
                           process_set: ProcessSet = global_process_set) -> Callable[[], torch.Tensor]:
    """Starts the reduction of a sparse COO tensor; returns a function that waits and returns the sparse result.

    As in Horovod, every rank's indices and values are all-gathered (repeated indices add up when coalesced), and
    ``Average`` divides the values by the number of processes.
    """
    ops.check_tensor("sparse_allreduce_async", tensor)
    if not tensor.is_sparse:
        raise ValueError(f"sparse_allreduce_async takes a sparse COO tensor; use allreduce_async for a dense "
                         f"one. Received: layout={tensor.layout}")
    reduction = ops.resolve_op(None, op)
    if reduction not in (ReduceOp.SUM, ReduceOp.AVERAGE):
        raise ValueError(f"A sparse all-reduce sums or averages. Received: op={reduction.value}")
    tensor = tensor.coalesce()
    # allgather concatenates on axis 0, so the indices travel transposed: one row per entry.
    indices = ops.allgather_async(tensor.indices().t().contiguous(), None if name is None else f"{name}.indices",
                                  process_set)
    values = ops.allgather_async(tensor.values(), None if name is None else f"{name}.values", process_set)

    def result() -> torch.Tensor:
        gathered_indices, gathered_values = synchronize(indices), synchronize(values)
        if reduction is ReduceOp.AVERAGE:
            gathered_values = gathered_values / process_set.size()
        return torch.sparse_coo_tensor(gathered_indices.t(), gathered_values, tensor.shape)

    return result
