"""``tf.contrib.distribute`` (TF 1): ``MirroredStrategy(num_gpus=)`` as TF 2's ``tf.distribute.MirroredStrategy``."""

from __future__ import annotations

from typing import Any

import torch

from stratagem import distribute
from stratagem.data.options import warn_once
from stratagem.tf._refusal import module_getattr


def MirroredStrategy(devices: list[str] | None = None, num_gpus: int | None = None,  # noqa: N802 (TF's name)
                     num_gpus_per_worker: int | None = None, cross_device_ops: Any = None,
                     auto_shard_dataset: bool = False, cross_tower_ops: Any = None) -> distribute.MirroredStrategy:
    """TF 1's ``tf.contrib.distribute.MirroredStrategy``: one replica per GPU, as TF 2's ``MirroredStrategy``.

    ``num_gpus=N`` asks for N replicas: on N CUDA devices when torch sees that many, else N CPU processes.
    ``cross_device_ops`` only picks TF's all-reduce kernel: dropped with one warning.
    """
    if cross_device_ops is not None or cross_tower_ops is not None:
        warn_once("contrib.MirroredStrategy.cross_device_ops", "cross_device_ops is dropped: stratagem all-reduces "
                  "with torch.distributed, and the choice of TF's all-reduce kernel changes no result.")
    count = num_gpus if num_gpus is not None else num_gpus_per_worker
    if devices is not None or count is None:
        return distribute.MirroredStrategy(devices)
    if count < 1:
        raise ValueError(f"num_gpus must be at least 1. Received: num_gpus={count}")
    if torch.cuda.is_available() and torch.cuda.device_count() >= count:
        return distribute.MirroredStrategy([f"cuda:{i}" for i in range(count)])
    return distribute.MirroredStrategy(num_replicas=count)


__getattr__ = module_getattr("tf.contrib.distribute")
__all__ = ["MirroredStrategy"]
