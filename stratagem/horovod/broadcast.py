"""``broadcast_parameters`` and ``broadcast_optimizer_state``: start every process from root's state."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from stratagem.horovod import basics, ops
from stratagem.horovod.basics import ProcessSet, global_process_set
from stratagem.horovod.objects import broadcast_object

__all__ = ["broadcast_parameters", "broadcast_optimizer_state"]


def broadcast_parameters(params: Mapping[str, torch.Tensor] | Iterable[Any], root_rank: int,
                         process_set: ProcessSet = global_process_set) -> None:
    """Overwrites every process's tensors with ``root_rank``'s, in place.

    Args:
        params: ``model.state_dict()`` (buffers included), ``model.named_parameters()`` or ``model.parameters()``.
        root_rank: The global rank whose values win.
        process_set: Limit the broadcast to a registered ``ProcessSet``.

    Raises:
        TypeError: If ``params`` is not one of those.

    Example:
        >>> hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # doctest: +SKIP
    """
    if isinstance(params, torch.Tensor) or not isinstance(params, Iterable):
        raise TypeError("broadcast_parameters takes model.state_dict(), model.named_parameters() or "
                        f"model.parameters(). Received: type={type(params).__name__}")
    if isinstance(params, Mapping):
        # Sorted by name: every rank must issue the broadcasts in the same order.
        tensors = [tensor for _, tensor in sorted(params.items())]
    else:
        tensors = [item[1] if isinstance(item, tuple) else item for item in params]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError("broadcast_parameters takes a state_dict, named_parameters() or parameters(). Received "
                         f"items of types {sorted({type(t).__name__ for t in tensors})}")
    with torch.no_grad():
        buffers = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        handles = [ops.broadcast_async_(b, root_rank, process_set=process_set) for b in buffers]
        for tensor, buffer, handle in zip(tensors, buffers, handles):
            ops.synchronize(handle)
            if buffer is not tensor:
                tensor.copy_(buffer)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              process_set: ProcessSet = global_process_set) -> None:
    """Gives every process ``root_rank``'s optimizer state: hyperparameters and per-parameter slots.

    Works before the first step (empty state): as Horovod, every trainable parameter without a gradient gets a zero one,
    but no optimizer step is taken, so parameters are not touched. Every rank builds its optimizer over the same
    parameters in the same order.

    Raises:
        TypeError: If ``optimizer`` is not a torch optimizer (or ``DistributedOptimizer``).
        ValueError: If this rank's optimizer has other parameter groups than root's.

    Example:
        >>> hvd.broadcast_optimizer_state(optimizer, root_rank=0)  # doctest: +SKIP
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("broadcast_optimizer_state takes the torch optimizer (or hvd.DistributedOptimizer) whose "
                        f"state to share. Received: type={type(optimizer).__name__}")
    if not optimizer.state_dict()["state"]:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
    state = broadcast_object(optimizer.state_dict() if basics.rank() == root_rank else None, root_rank,
                             process_set=process_set)
    if basics.rank() != root_rank:
        try:
            optimizer.load_state_dict(state)
        except (ValueError, KeyError) as err:
            raise ValueError(f"[rank {basics.rank()}] Rank {root_rank}'s optimizer state does not fit this "
                             "optimizer: every rank must build the same optimizer over the same parameters. "
                             f"Received: {err}") from err
