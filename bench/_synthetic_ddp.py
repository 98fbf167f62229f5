"""The plain-DDP peer of Horovod's ``pytorch_synthetic_benchmark.py``, for ``bench_horovod_synthetic.py``.

Run by the launcher on every rank (``stratagem run -np 2``, which sets
torchrun's variables). The same torchvision model, fixed random batch,
optimizer (SGD, learning rate 0.01 x ranks) and timing protocol as Horovod's
script (warm-up steps, then ``num_iters`` timings of ``num_batches_per_iter``
steps with ``timeit``), with torch's ``DistributedDataParallel`` doing the
gradient all-reduce (buckets overlapped with the backward pass, gradients as
bucket views, ``--bucket-cap-mb``, no per-step buffer broadcast). Horovod's script normalizes with
``hvd.SyncBatchNorm`` (statistics over the global batch). torch's
``SyncBatchNorm`` refuses CPU tensors, and DDP refuses modules holding one on
CPU, so ``--norm`` picks the peer's model: ``batch`` (default) is torch's
local ``BatchNorm2d``, a model that communicates less than Horovod's (no
statistics exchanged); ``sync`` is the same model as Horovod's script: a
``BatchNorm2d`` whose training statistics cover every rank's batch with
stratagem.horovod's CPU arithmetic (one all-gather forward, one all-reduce
backward per layer). Rank 0 prints the line Horovod's script ends with,
``Total img/sec on N CPU(s): X +-Y``.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torchvision import models


class GlobalBatchNorm2d(torch.nn.BatchNorm2d):
    """``BatchNorm2d`` whose training statistics cover every rank's batch: the model of Horovod's script, on DDP."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(input)
        import stratagem.horovod as hvd
        from stratagem.horovod.sync_batch_norm import _SyncedBatchNorm

        out, mean, var, total = _SyncedBatchNorm.apply(input, self.weight, self.bias, self.eps, None)
        hvd.SyncBatchNorm._update_running_stats(self, mean, var, total)  # type: ignore[arg-type]
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=3)
    parser.add_argument("--norm", choices=("batch", "sync"), default="batch",
                        help="batch: local BatchNorm2d; sync: statistics over every rank's batch, as Horovod's script")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size (default: DDP's 25)")
    args = parser.parse_args()
    dist.init_process_group("gloo")  # env://: the launcher's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    size = dist.get_world_size()
    norm_layer = GlobalBatchNorm2d if args.norm == "sync" else torch.nn.BatchNorm2d
    # DDP's strongest setting here: gradients as bucket views, and no per-step broadcast of the batch-norm
    # buffers (Horovod's script does not sync them per step either; with sync batch norm they agree anyway).
    model = DistributedDataParallel(getattr(models, args.model)(norm_layer=norm_layer), gradient_as_bucket_view=True,
                                    bucket_cap_mb=args.bucket_cap_mb, broadcast_buffers=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size)
    data = torch.randn(args.batch_size, 3, 224, 224)
    target = torch.LongTensor(args.batch_size).random_() % 1000

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    timeit.timeit(step, number=args.num_warmup_batches)
    rates = [args.batch_size * args.num_batches_per_iter / timeit.timeit(step, number=args.num_batches_per_iter)
             for _ in range(args.num_iters)]
    if dist.get_rank() == 0:
        print(f"Total img/sec on {size} CPU(s): {size * np.mean(rates):.1f} +-{size * 1.96 * np.std(rates):.1f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
