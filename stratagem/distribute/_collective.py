"""Shared machinery of the all-reduce strategies (Mirrored and MultiWorkerMirrored).

Both keep one replica per process and synchronise gradients with DDP; they differ only in where the job's shape
comes from, which each subclass supplies through ``_resolve``.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import os
import weakref

import torch
import torch.distributed as dist
from torch import nn
from typing_extensions import override

from stratagem.distribute import collectives
from stratagem.distribute.cluster import ClusterResolver, describe_group
from stratagem.distribute.input_context import InputContext
from stratagem.distribute.options import CommunicationOptions
from stratagem.distribute.strategy import Strategy
from stratagem.distribute.values import ReduceOp
from stratagem.errors import ConfigurationError


class CollectiveStrategy(Strategy):
    """Base of the synchronous all-reduce strategies: one process per replica."""

    def __init__(self, *, cluster_resolver: ClusterResolver | None = None,
                 communication_options: CommunicationOptions | None = None) -> None:
        self._options = communication_options or CommunicationOptions()
        self._timeout_s = self._options.resolved_timeout_s()
        self._owns_group = False
        self._agreements = 0
        super().__init__(cluster_resolver=cluster_resolver)

    @abc.abstractmethod
    def _resolve(self) -> tuple[int, int, int, int, str, int, torch.device]:
        """Returns (rank, world_size, local_rank, local_world_size, master_addr, master_port, device)."""

    @override
    def _setup(self) -> None:
        rank, world_size, local_rank, local_world_size, addr, port, device = self._resolve()
        self._num_replicas, self._replica_id, self._device = world_size, rank, device
        backend = self._options.backend(device.type)
        if world_size > 1 and "nccl" in backend:  # before NCCL hangs or fails with its own text
            check_one_gpu_per_rank(local_rank=local_rank, local_world_size=local_world_size, backend=backend,
                                   num_visible_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
                                   visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if world_size == 1:
            return
        if dist.is_initialized():
            if dist.get_world_size() != world_size or dist.get_rank() != rank:
                raise RuntimeError(
                    f"A process group of world_size={dist.get_world_size()} already exists in this process; "
                    f"a strategy for world_size={world_size} cannot join it. Create one strategy per process.")
            return
        collectives.init_process_group(
            rank=rank, world_size=world_size, master_addr=addr, master_port=port,
            backend=backend, timeout_s=self._timeout_s,
            peers=describe_group(self._cluster_resolver),
        )
        self._owns_group = True
        # Held weakly: a process-wide exit hook must not keep the strategy (and what it installed) alive.
        atexit.register(_teardown_at_exit, weakref.ref(self))

    @override
    def _wrap_module(self, module: nn.Module) -> nn.Module:
        module = module.to(self._device)
        if self._num_replicas == 1:
            return module
        bucket_mb = self._options.bytes_per_pack / 2**20 if self._options.bytes_per_pack else None
        return collectives.wrap_ddp(module, device=self._device, bucket_cap_mb=bucket_mb,
                                    compression=self._options.compression)

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager[object]:
        """DDP's ``no_sync``: backward keeps gradients local, so accumulation syncs once per update."""
        if isinstance(module, nn.parallel.DistributedDataParallel):
            return module.no_sync()
        return contextlib.nullcontext()

    @override
    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        if self._num_replicas == 1:
            return tensor
        return collectives.all_reduce(tensor, op.to_torch(), timeout_s=self._timeout_s)

    def agree_through_store(self, flags: list[bool]) -> list[bool] | None:
        """``any_replica`` through the rendezvous store, no collective (``AgreesThroughStore``)."""
        if not self._owns_group:  # a group started outside stratagem: no store of ours, so an all-reduce
            return None
        self._agreements += 1  # every replica agrees as often, in the same order: the keys match
        return collectives.any_rank(flags, key=f"stratagem/any_replica/{self._agreements}", timeout_s=self._timeout_s)

    @override
    def _input_context(self) -> InputContext:
        return InputContext(num_input_pipelines=self._num_replicas, input_pipeline_id=self._replica_id,
                            num_replicas_in_sync=self._num_replicas)

    @override
    def _teardown(self) -> None:
        if self._owns_group:
            collectives.leave_process_group()
            self._owns_group = False


def check_one_gpu_per_rank(*, local_rank: int, local_world_size: int, num_visible_devices: int, backend: str,
                           visible_devices: str | None = None) -> None:
    """Refuses a host whose ranks would share a GPU under NCCL, which needs one GPU per rank.

    Each rank takes GPU ``local_rank % num_visible_devices``; with more ranks on the host than GPUs it sees, two
    ranks get the same one, and NCCL then fails with its own text or hangs. A process shown exactly one GPU through
    ``CUDA_VISIBLE_DEVICES`` (``visible_devices``) was given its own by the launcher or the user: it is trusted.

    Raises:
        ConfigurationError: Naming the ranks that would share a GPU, the GPU, and the fix.
    """
    if "nccl" not in backend or local_world_size <= 1:
        return
    received = (f"Received: local_rank={local_rank}, local_world_size={local_world_size}, "
                f"visible_gpus={num_visible_devices}, CUDA_VISIBLE_DEVICES={visible_devices!r}, backend={backend!r}")
    if num_visible_devices == 0:
        raise ConfigurationError(
            f"The NCCL backend needs one GPU per rank, but local rank {local_rank} sees no GPU. Run on GPU hosts, "
            "make the GPUs visible (CUDA_VISIBLE_DEVICES), or use gloo: "
            f"CommunicationOptions(implementation='ring'). {received}")
    pinned = visible_devices is not None and num_visible_devices == 1 and "," not in visible_devices
    if local_world_size <= num_visible_devices or pinned:
        return
    gpu = local_rank % num_visible_devices
    sharing = [r for r in range(local_world_size) if r % num_visible_devices == gpu]
    raise ConfigurationError(
        f"The NCCL backend needs one GPU per rank, but this host runs {local_world_size} ranks and sees "
        f"{num_visible_devices} GPU(s), so local ranks {', '.join(map(str, sharing))} would all use cuda:{gpu} "
        "(NCCL then fails or hangs). Start at most one process per GPU (stratagem run -n "
        f"{num_visible_devices}, torchrun --nproc_per_node {num_visible_devices}), or give each process its own GPU "
        f"with CUDA_VISIBLE_DEVICES. {received}")


def _teardown_at_exit(strategy: weakref.ref[CollectiveStrategy]) -> None:
    alive = strategy()
    if alive is not None:
        alive._teardown()
    elif dist.is_initialized():  # the strategy that started the group is gone; no other one owns it
        collectives.leave_process_group()
