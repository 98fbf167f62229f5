"""Gradient compression for the all-reduce strategies: bf16, fp16 and PowerSGD, on DDP's hooks.

``CommunicationOptions(compression=...)`` names one; ``register_compression`` installs it on a DDP module,
``all_reduce_compressed`` compresses one all-reduce outside DDP, and ``compress_tensor``/``decompress_tensor`` are
the casts (Horovod's ``Compression.fp16`` is them). The hooks are torch's ``ddp_comm_hooks`` made to keep the SUM of
the replicas' gradients (each loss is already divided by the global batch): bf16/fp16 wrap our summing all-reduce in
torch's cast wrappers, with no division by the world size, so nothing is rounded twice; PowerSGD's average is
multiplied back by the world size. fp16 sums in float16, as Horovod's does: a sum beyond 65504 overflows (bf16 has
float32's range).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

__all__ = ["PowerSGD", "Compression", "parse_compression", "register_compression", "all_reduce_compressed",
           "compress_tensor", "decompress_tensor", "refuse_compression"]

_CAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class PowerSGD:
    """Low-rank gradient compression (Vogels et al., 2019), torch's ``powerSGD_hook``.

    Each gradient matrix is sent as two rank-``rank`` factors; the part they miss is kept and added to the next
    step's gradient (error feedback), so nothing is lost over time. The first ``start_iter`` steps are sent
    uncompressed (torch's ``start_powerSGD_iter``), as the method needs.

    Args:
        rank: The approximation rank (torch's ``matrix_approximation_rank``).
        start_iter: Steps all-reduced uncompressed first; at least 2.
        min_compression_rate: A matrix is compressed only when this saves at least this factor; smaller ones are
            sent as they are.

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
        f"Received: compression={compression!r}")


def register_compression(ddp: nn.parallel.DistributedDataParallel, compression: Compression) -> None:
    """Installs ``compression`` (None: the plain sum) as ``ddp``'s hook, keeping the SUM; before the first backward."""
    compression = parse_compression(compression)
    if compression is None:
        ddp.register_comm_hook(state=None, hook=_allreduce_sum_hook)
    elif isinstance(compression, PowerSGD):
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=compression.rank,
            start_powerSGD_iter=compression.start_iter, min_compression_rate=compression.min_compression_rate,
        )
        ddp.register_comm_hook(state=state, hook=_named(_powersgd_sum_hook(dist.get_world_size())))
    else:
        wrapper = default_hooks.bf16_compress_wrapper if compression == "bf16" else default_hooks.fp16_compress_wrapper
        ddp.register_comm_hook(state=None, hook=_named(wrapper(_allreduce_sum_hook)))


def all_reduce_compressed(tensor: torch.Tensor, compression: Compression, *, group: Any = None) -> torch.Tensor:
    """The SUM of ``tensor`` over the group, sent as bf16 or fp16; returns a new tensor of ``tensor``'s dtype.

    For gradients all-reduced outside DDP (Horovod's optimizer), with the DDP hooks' arithmetic. PowerSGD needs
    DDP's buckets and per-bucket state.

    Raises:
        ValueError: For ``PowerSGD`` or an unknown compression.
    """
    compression = parse_compression(compression)
    if isinstance(compression, PowerSGD):
        raise ValueError(
            "PowerSGD compresses DDP's gradient buckets and keeps per-bucket state, so it cannot compress a lone "
            "tensor's all-reduce. Use 'bf16' or 'fp16' here, or train through strategy.distribute_module (DDP). "
            f"Received: compression={compression!r}")
    if compression is None:
        out = tensor.detach().clone()
        dist.all_reduce(out, group=group)
        return out
    packed, dtype = compress_tensor(tensor.detach(), compression)
    dist.all_reduce(packed, group=group)
    return decompress_tensor(packed, dtype)


def compress_tensor(tensor: torch.Tensor, compression: Compression) -> tuple[torch.Tensor, torch.dtype | None]:
    """``tensor`` as it travels under ``compression`` (``None``, ``"bf16"``, ``"fp16"``), and the dtype to restore.

    A floating-point tensor is cast (a new tensor); anything else, and every tensor under ``None``, travels as it is
    (integers stay exact). ``decompress_tensor`` undoes it; the two are Horovod's ``Compression.none``/``fp16``.
    """
    compression = parse_compression(compression)
    if isinstance(compression, PowerSGD):
        raise ValueError("PowerSGD compresses DDP's gradient buckets, not a lone tensor. Use 'bf16' or 'fp16'. "
                         f"Received: compression={compression!r}")
    if compression is None or not tensor.is_floating_point():
        return tensor, None
    return tensor.to(_CAST[compression]), tensor.dtype


def decompress_tensor(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """The tensor ``compress_tensor`` sent, back in ``dtype`` (``None``: as it is)."""
    return tensor if dtype is None else tensor.to(dtype)


def refuse_compression(options: Any, strategy_name: str, how: str) -> None:
    """Raises where a strategy that does not all-reduce through DDP is given a compression."""
    compression = getattr(options, "compression", None)
    if compression is not None:
        raise ValueError(
            f"{strategy_name} {how}, not through DDP's all-reduce, so CommunicationOptions(compression=...) "
            "would be ignored. Use MirroredStrategy or MultiWorkerMirroredStrategy for compressed gradients, or "
            f"drop compression. Received: compression={compression!r}")


def _powersgd_sum_hook(world_size: int) -> Any:
    """torch's ``powerSGD_hook`` (an average) times the world size, run to completion before the next bucket."""

    def powersgd_sum_hook(state: powerSGD_hook.PowerSGDState,
                          bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        # NOTE: the hook chains its all-reduces in callbacks; with several buckets (DDP's first is small) those of one
        # bucket and the next bucket's first could start in a different order on each rank, which gloo reports as a
        # collective mismatch. Waiting here keeps every rank's order the same.
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(powerSGD_hook.powerSGD_hook(state, bucket).wait().mul_(world_size))
        return done

    return powersgd_sum_hook


def _named(hook: Any) -> Any:
    """``hook`` with the annotations DDP checks and a name of our own."""
    # DDP checks a hook's annotations; postponed evaluation leaves strings, so give it the types.
    hook.__annotations__ = _HOOK_TYPES
    # NOTE: DDP refuses a hook *named* bf16_compress_wrapper_hook unless NCCL >= 2.10 is present, but gloo all-reduces
    # bfloat16 too (tests/dist/test_compression_accumulation.py runs it).
    hook.__name__ = hook.__qualname__ = f"stratagem_sum_{hook.__name__}"
    return hook


def _allreduce_sum_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


_HOOK_TYPES = {"state": object, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
_allreduce_sum_hook.__annotations__ = _HOOK_TYPES
