"""Gradient compression for the all-reduce strategies: bf16, fp16 and PowerSGD, on DDP's hooks.

``CommunicationOptions(compression=...)`` names one; ``register_compression``
installs it on a DDP module, and ``all_reduce_compressed`` compresses one
tensor's all-reduce outside DDP (what a Horovod-style optimizer calls). The
hooks are torch's (``torch.distributed.algorithms.ddp_comm_hooks``); they
average across ranks, while stratagem SUMS gradients (each replica's loss is
already divided by the global batch), so every hook's result is multiplied
back by the world size. For a power-of-two world size the division and the
multiplication are exact; otherwise they add one rounding of the compressed
type, far below its own precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

__all__ = ["PowerSGD", "Compression", "parse_compression", "register_compression", "all_reduce_compressed", "refuse_compression"]

_CAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class PowerSGD:
    """Low-rank gradient compression (Vogels et al., 2019), torch's ``powerSGD_hook``.

    Each gradient matrix is sent as two rank-``rank`` factors; the part they
    miss is kept and added to the next step's gradient (error feedback), so
    nothing is lost over time. The first ``start_iter`` steps are sent
    uncompressed (torch's ``start_powerSGD_iter``), as the method needs.

    Args:
        rank: The approximation rank (torch's ``matrix_approximation_rank``).
        start_iter: Steps all-reduced uncompressed first; at least 2.
        min_compression_rate: A matrix is compressed only when this saves at
            least this factor; smaller ones are sent as they are.

    Example:
        >>> options = CommunicationOptions(compression=PowerSGD(rank=2))  # doctest: +SKIP
    """

    rank: int = 1
    start_iter: int = 1000
    min_compression_rate: float = 2.0

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"PowerSGD rank must be a positive int. Received: rank={self.rank!r}")
        if self.start_iter < 2:
            # torch's hook needs two plain steps before error feedback and warm start can begin.
            raise ValueError(f"PowerSGD start_iter must be at least 2. Received: start_iter={self.start_iter}")


Compression = str | PowerSGD | None


def parse_compression(compression: Any) -> Compression:
    """Checks a ``compression`` value: ``None``, ``"bf16"``, ``"fp16"`` or a ``PowerSGD``."""
    if compression is None or isinstance(compression, PowerSGD):
        return compression
    if isinstance(compression, str) and compression.lower() in _CAST:
        return compression.lower()
    raise ValueError(
        "compression must be None, 'bf16', 'fp16' or stratagem.distribute.PowerSGD(rank). "
        f"Received: compression={compression!r}"
    )


def register_compression(ddp: nn.parallel.DistributedDataParallel, compression: Compression) -> None:
    """Installs ``compression`` as ``ddp``'s communication hook, keeping the replicas' SUM.

    ``None`` installs the plain summing all-reduce. Call once, before the first backward.
    """
    compression = parse_compression(compression)
    world_size = dist.get_world_size()
    if compression is None:
        ddp.register_comm_hook(state=None, hook=_allreduce_sum_hook)
    elif isinstance(compression, PowerSGD):
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=compression.rank,
            start_powerSGD_iter=compression.start_iter, min_compression_rate=compression.min_compression_rate,
        )
        ddp.register_comm_hook(state=state, hook=_summing(powerSGD_hook.powerSGD_hook, world_size))
    else:
        torch_hook = default_hooks.bf16_compress_hook if compression == "bf16" else default_hooks.fp16_compress_hook
        ddp.register_comm_hook(state=None, hook=_summing(torch_hook, world_size))


def all_reduce_compressed(tensor: torch.Tensor, compression: Compression, *, group: Any = None) -> torch.Tensor:
    """The SUM of ``tensor`` over the group, sent as bf16 or fp16; returns a new tensor of ``tensor``'s dtype.

    For gradients all-reduced outside DDP (a Horovod-style optimizer). As DDP's
    fp16 hook does, each rank divides by the world size before the reduction
    (so fp16 does not overflow where the mean would not) and the result is
    multiplied back. PowerSGD needs DDP's buckets and per-bucket state, so it
    is refused here.

    Raises:
        ValueError: For ``PowerSGD`` or an unknown compression.
    """
    compression = parse_compression(compression)
    if isinstance(compression, PowerSGD):
        raise ValueError(
            "PowerSGD compresses DDP's gradient buckets and keeps per-bucket state, so it cannot compress a lone "
            "tensor's all-reduce. Use 'bf16' or 'fp16' here, or train through strategy.distribute_module (DDP). "
            f"Received: compression={compression!r}"
        )
    world_size = dist.get_world_size(group)
    if compression is None:
        out = tensor.detach().clone()
        dist.all_reduce(out, group=group)
        return out
    packed = tensor.detach().to(_CAST[compression]).div_(world_size)
    dist.all_reduce(packed, group=group)
    return packed.to(tensor.dtype).mul_(world_size)


def refuse_compression(options: Any, strategy_name: str, how: str) -> None:
    """Raises where a strategy that does not all-reduce through DDP is given a compression."""
    compression = getattr(options, "compression", None)
    if compression is not None:
        raise ValueError(
            f"{strategy_name} {how}, not through DDP's all-reduce, so CommunicationOptions(compression=...) "
            "would be ignored. Use MirroredStrategy or MultiWorkerMirroredStrategy for compressed gradients, or "
            f"drop compression. Received: compression={compression!r}"
        )


def _summing(hook: Any, world_size: int) -> Any:
    """``hook`` (which averages over ranks) made to sum: its result times the world size."""

    def summing_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return hook(state, bucket).then(lambda fut: fut.value().mul_(world_size))

    # DDP checks a hook's annotations; postponed evaluation leaves strings, so give it the types.
    summing_hook.__annotations__ = _HOOK_TYPES
    # NOTE: a name of our own: DDP refuses a hook *named* bf16_compress_hook unless NCCL >= 2.10 is
    # present, but gloo all-reduces bfloat16 too (tests/dist/test_compression_accumulation.py runs it).
    summing_hook.__name__ = summing_hook.__qualname__ = f"summing_{hook.__name__}"
    return summing_hook


def _allreduce_sum_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


_HOOK_TYPES = {"state": object, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
_allreduce_sum_hook.__annotations__ = _HOOK_TYPES
