"""Horovod's ``SyncBatchNorm``: batch statistics over the whole global batch, on CPU (gloo) and CUDA.

On CUDA it is ``torch.nn.SyncBatchNorm``. torch's refuses CPU tensors, so on
CPU the training-mode statistics are computed here: the per-channel sums are
all-reduced with torch's differentiable all-reduce, so gradients flow through
the global mean and variance as they do in torch's CUDA kernel.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_functional

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
        return self._forward_synced_cpu(input)

    def _forward_synced_cpu(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        axes = [0, *range(2, input.dim())]
        shape = [1, input.shape[1]] + [1] * (input.dim() - 2)
        group = self.process_group
        # Two passes (mean, then squared deviations) for the variance: E[x^2]-E[x]^2 loses digits.
        count = torch.tensor([input.numel() // input.shape[1]], dtype=input.dtype)
        sums = dist_functional.all_reduce(torch.cat([input.sum(axes), count]), group=group)
        total = sums[-1]
        mean = sums[:-1] / total
        squares = dist_functional.all_reduce(((input - mean.view(shape)) ** 2).sum(axes), group=group)
        var = squares / total
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), float(total))
        out = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, total: float) -> None:
        assert self.num_batches_tracked is not None and self.running_mean is not None and self.running_var is not None
        self.num_batches_tracked.add_(1)
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        # Running variance is the unbiased estimate, as torch's batch norm keeps it.
        unbiased = var * total / max(total - 1.0, 1.0)
        self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)
