"""``ShardedDataParallelStrategy``: data parallelism with the variables sharded across replicas (FSDP2).

Each replica trains on its share of every global batch, as under ``MultiWorkerMirroredStrategy``, but holds 1/N of
every parameter, gradient and optimizer state (torch's ``fully_shard``): a layer's parameters are all-gathered for
its forward and backward and freed after, and gradients are reduce-scattered. The job's shape comes from the cluster
resolvers; checkpoints of the sharded state are ``checkpoint.sharded``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from typing_extensions import override

from stratagem.distribute.multi_worker import WorkerClusterStrategy

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class ShardedDataParallelStrategy(WorkerClusterStrategy):
    """Synchronous data parallelism whose parameters and optimizer state are sharded (FSDP2).

    For models whose parameters and optimizer state do not fit one device: each of N replicas holds about 1/N. It
    computes what ``MultiWorkerMirroredStrategy`` does, at the price of one all-gather per layer in forward and backward
    instead of one gradient all-reduce. (Keras 3's ``ModelParallel`` splits each layer's computation instead, hence the
    name.) Every module that owns parameters is its own shard group, then the root; FSDP does not support a parameter
    used outside its module's ``forward`` (tied weights). Gradient accumulation reduce-scatters on every micro-step:
    skipping it, as DDP's ``no_sync`` does, would hold whole gradients, which this strategy exists to avoid. Build the
    optimizer through ``compile``: the sharded parameters replace the module's there, so a torch optimizer built before
    would step the old ones.

    Args:
        cluster_resolver: Where the cluster comes from; default: ``TF_CONFIG``,
            then torchrun's variables, then SLURM's, else a single worker.
        communication_options: ``CommunicationOptions`` (timeout, backend: gloo on CPU, NCCL on CUDA).

    Example:
        >>> strategy = stratagem.distribute.ShardedDataParallelStrategy()  # doctest: +SKIP
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = stratagem.Model(build_large_model())
        ...     model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        >>> model.fit(x, y, batch_size=64 * strategy.num_replicas_in_sync)  # doctest: +SKIP
    """

    @override
    def _wrap_module(self, module: nn.Module) -> nn.Module:
        # NOTE: FSDP is imported here, not at the top: importing it takes seconds, and every
        # stratagem process would pay them at `import stratagem`.
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule

        module = module.to(self._device)
        if self._num_replicas == 1 or isinstance(module, FSDPModule):  # nothing to shard over; or compiled twice
            return module
        mesh = init_device_mesh(self._device.type, (self._num_replicas,))
        return shard_module(module, mesh=mesh)

    def full_state_dict(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """The module's whole state on every replica, on the CPU (all-gathers every shard: a collective)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # NOTE: cpu_offload=False so every rank gets the full tensors; with it, only rank 0 would.
        state = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))
        return {key: cast(torch.Tensor, value).detach().cpu() for key, value in state.items()}

    def load_full_state_dict(self, module: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Loads a whole state into ``module``: each replica keeps the slices its shards cover."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(module, cast("dict[str, Any]", state), options=StateDictOptions(full_state_dict=True))


def shard_module(module: nn.Module, *, mesh: DeviceMesh) -> nn.Module:
    """Applies ``fully_shard`` to every module that owns parameters (innermost first), then to ``module``.

    Gradients are SUMMED, not averaged (FSDP's default): the loss is already divided by the global batch, as for DDP.
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard

    # NOTE: a module that only holds parameters (no forward of its own, as the per-layer holders of a Keras
    # model) is never called, so FSDP's hooks on it would never gather its shard: it joins its parent's group.
    owners = [m for m in module.modules() if m is not module and any(True for _ in m.parameters(recurse=False))
              and type(m).forward is not nn.Module.forward]
    # NOTE: FSDP's default reshard_after_forward=True: a layer's gathered parameters are freed after
    # its forward and gathered again for its backward, so at most one layer is ever whole (least memory).
    for owner in reversed(owners):  # modules() is parents first: children get their own groups first
        fully_shard(owner, mesh=mesh)
    fully_shard(module, mesh=mesh)
    for sharded in module.modules():
        if isinstance(sharded, FSDPModule):
            sharded.set_gradient_divide_factor(1.0)
            # NOTE: a plain SUM reduce-scatter (no AVG or PREMUL_SUM op), which gloo and NCCL both have.
            sharded.set_force_sum_reduction_for_comms(True)
    return module
