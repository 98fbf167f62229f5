"""Horovod's ``SyncBatchNorm``: batch statistics over the whole global batch, on CPU (gloo) and CUDA.

On CUDA it is ``torch.nn.SyncBatchNorm``, which refuses CPU tensors; on CPU training mode runs here with torch's CUDA
arithmetic: forward all-gathers each rank's count, mean and variance and combines them (Chan's formula: no
E[x^2]-E[x]^2 cancellation); backward all-reduces the per-channel sums of dy and dy * (x - mean) in one call, overlapped
with the local input gradient. Weight and bias gradients stay local, as torch's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from stratagem.horovod import basics
from stratagem.horovod.basics import ProcessSet, global_process_set

__all__ = ["SyncBatchNorm"]


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """Batch normalization whose training statistics cover every process's batch.

    Args:
        num_features: Channels (axis 1 of the input).
        eps: Added to the variance.
        momentum: Of the running statistics; ``None`` for a cumulative average.
        affine: Learn a scale and shift.
        track_running_stats: Keep running statistics for evaluation.
        process_set: Normalize over a registered ``ProcessSet`` only.

    Example:
        >>> bn = hvd.SyncBatchNorm(16)  # doctest: +SKIP
        >>> out = bn(torch.randn(8, 16, 4, 4))  # doctest: +SKIP
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_set: ProcessSet = global_process_set) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self._process_set = process_set

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        syncing = self.training and dist.is_available() and dist.is_initialized() and self._process_set.size() > 1
        self.process_group = basics.group_of(self._process_set) if syncing else None
        if not syncing or input.device.type != "cpu":
            return super().forward(input)
        self._check_input_dim(input)
        out, mean, var, total = _SyncedBatchNorm.apply(input, self.weight, self.bias, self.eps, self.process_group)
        if self.track_running_stats:
            self._update_running_stats(mean, var, total)
        return out

    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, total: float) -> None:
        assert self.num_batches_tracked is not None and self.running_mean is not None and self.running_var is not None
        self.num_batches_tracked.add_(1)
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        # Running variance is the unbiased estimate, as torch's batch norm keeps it.
        unbiased = var * total / max(total - 1.0, 1.0)
        self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


class _SyncedBatchNorm(torch.autograd.Function):
    """Batch norm over every rank's batch on CPU: one all-gather forward, one all-reduce backward."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                group: dist.ProcessGroup | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
        count = input.numel() // input.shape[1]
        local_mean, local_var = torch.batch_norm_update_stats(input, None, None, 0.0)  # biased variance (Welford)
        mine = torch.cat([torch.tensor([float(count)], dtype=torch.float64), local_mean.double(), local_var.double()])
        parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, mine, group=group)
        stats = torch.stack(parts)
        counts, means, variances = stats[:, :1], stats[:, 1:1 + input.shape[1]], stats[:, 1 + input.shape[1]:]
        total = counts.sum()
        mean = (counts * means).sum(0) / total
        var = (counts * (variances + (means - mean) ** 2)).sum(0) / total
        mean, var = mean.to(input.dtype), var.to(input.dtype)
        out = torch.nn.functional.batch_norm(input, mean, var, weight, bias, False, 0.0, eps)
        ctx.save_for_backward(input, weight, mean, var)
        ctx.group, ctx.total, ctx.eps = group, float(total), eps
        ctx.mark_non_differentiable(mean, var)
        return out, mean, var, float(total)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, *_: Any) -> tuple[torch.Tensor | None, ...]:
        input, weight, mean, var = ctx.saved_tensors
        shape = [1, input.shape[1]] + [1] * (input.dim() - 2)
        invstd = torch.rsqrt(var + ctx.eps)
        # One fused pass: torch's eval-mode batch-norm backward, given the global mean and variance, returns
        # sum(dy * (x - mean) * invstd) as the weight's gradient and sum(dy) as the bias's.
        _, grad_weight, grad_bias = torch.ops.aten.native_batch_norm_backward(
            grad_out, input, weight, mean, var, None, None, False, ctx.eps, [False, True, True])
        grad_input = None
        if ctx.needs_input_grad[0]:
            sums = torch.cat([grad_bias, grad_weight / invstd])  # sum(dy), sum(dy * (x - mean))
            # The global batch's sums (the statistics depend on every row), sent while the local term is computed.
            work = dist.all_reduce(sums, group=ctx.group, async_op=True)
            scale = invstd * weight if weight is not None else invstd
            grad_input = grad_out * scale.view(shape)
            work.wait()
            mean_dy, mean_dy_xmu = (sums / ctx.total).chunk(2)
            # grad_input = (dy - mean_dy - (x - mean) * invstd^2 * mean_dy_xmu) * invstd * weight, per channel:
            # dy * scale + x * b + c.
            b = -scale * invstd * invstd * mean_dy_xmu
            grad_input.addcmul_(input, b.view(shape)).add_((-scale * mean_dy - b * mean).view(shape))
        return (grad_input, grad_weight if weight is not None and ctx.needs_input_grad[1] else None,
                grad_bias if ctx.needs_input_grad[2] else None, None, None)
