"""``tf.distribute``: TensorFlow's names for stratagem's strategies, and clear refusals for TPUs.

The strategies and their companions are ``stratagem.distribute``'s; this module adds TF's spellings (the
``experimental``, ``cluster_resolver`` and ``coordinator`` namespaces, cross-device-ops names, older aliases) and
``TPUStrategy`` / ``TPUClusterResolver``, which raise: stratagem runs on torch's CPU and CUDA devices.
"""

from __future__ import annotations

import types
from typing import Any

from stratagem.distribute import (
    CentralStorageStrategy, ClusterResolver, CommunicationImplementation, CommunicationOptions, DistributedDataset,
    FixedShardsPartitioner, InputContext, InputOptions, MaxSizePartitioner, MinSizePartitioner, MirroredStrategy,
    MultiWorkerMirroredStrategy, OneDeviceStrategy, PerReplica, ReduceOp, SimpleClusterResolver, SlurmClusterResolver,
    Strategy, TFConfigClusterResolver, get_strategy, has_strategy,
)
from stratagem.distribute.context import get_replica_context, in_cross_replica_context
from stratagem.distribute.values import ReplicaContext, ValueContext
from stratagem.errors import ConfigurationError
from stratagem.tf._refusal import module_getattr

# TF's older name for the collective implementation (tf.distribute.experimental.CollectiveCommunication).
CollectiveCommunication = CommunicationImplementation

# Parameter-server pieces need grpcio (the "ps" extra): imported on first use, as stratagem.distribute does.
_PS_STRATEGY = {"ParameterServerStrategy": ("stratagem.distribute.parameter_server", "ParameterServerStrategy")}
_COORDINATOR = {name: ("stratagem.distribute.coordinator", name)
                for name in ("ClusterCoordinator", "RemoteValue", "PerWorkerValues")}


def _refuse_tpu(name: str) -> ConfigurationError:
    # A ValueError, as TF's TPUClusterResolver raises on a machine without TPUs: scripts that catch it
    # and fall back to another strategy keep working.
    return ConfigurationError(
        "TPUs are not supported: stratagem runs on PyTorch's CPU and CUDA devices, and torch has no TPU backend here. "
        "Use tf.distribute.MirroredStrategy() (every GPU of this host, or CPU replicas) or "
        f"MultiWorkerMirroredStrategy() (several hosts) instead. Received: {name}")


class TPUStrategy:
    """Refused: TPUs are not supported (stratagem runs on torch's CPU and CUDA devices)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise _refuse_tpu("tf.distribute.TPUStrategy(...)")


class TPUClusterResolver:
    """Refused: TPUs are not supported (stratagem runs on torch's CPU and CUDA devices)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise _refuse_tpu("tf.distribute.cluster_resolver.TPUClusterResolver(...)")


class CrossDeviceOps:
    """TF's all-reduce algorithm for ``MirroredStrategy(cross_device_ops=)``: accepted; torch picks its own.

    Every algorithm sums the same gradients, so results do not depend on it.
    """

    def __init__(self, **config: Any) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.config.items())})"


class NcclAllReduce(CrossDeviceOps):
    """``tf.distribute.NcclAllReduce``: accepted by ``MirroredStrategy``; torch picks the algorithm."""

    def __init__(self, num_packs: int = 1) -> None:
        super().__init__(num_packs=num_packs)


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """``tf.distribute.HierarchicalCopyAllReduce``: accepted by ``MirroredStrategy``; torch picks the algorithm."""

    def __init__(self, num_packs: int = 1) -> None:
        super().__init__(num_packs=num_packs)


class ReductionToOneDevice(CrossDeviceOps):
    """``tf.distribute.ReductionToOneDevice``: accepted by ``MirroredStrategy``; torch picks the algorithm."""

    def __init__(self, reduce_to_device: str | None = None, accumulation_fn: Any = None) -> None:
        super().__init__(reduce_to_device=reduce_to_device, accumulation_fn=accumulation_fn)


def _experimental_multi_worker(communication: CommunicationImplementation | str = CommunicationImplementation.AUTO,
                               cluster_resolver: ClusterResolver | None = None,
                               communication_options: CommunicationOptions | None = None) -> MultiWorkerMirroredStrategy:
    """``tf.distribute.experimental.MultiWorkerMirroredStrategy(communication=)``: TF 2.3's spelling."""
    if communication_options is None:
        communication_options = CommunicationOptions(implementation=communication)
    return MultiWorkerMirroredStrategy(cluster_resolver=cluster_resolver, communication_options=communication_options)


def _namespace(name: str, names: dict[str, Any], lazy: dict[str, tuple[str, str]] | None = None) -> types.ModuleType:
    """A TF sub-namespace (``tf.distribute.experimental``): its names, lazily imported ones, and refusals."""
    namespace = types.ModuleType(name)
    namespace.__dict__.update(names, __getattr__=module_getattr(name, lazy or {}),
                              __dir__=lambda: sorted(names) + sorted(lazy or {}))
    return namespace


cluster_resolver = _namespace("tf.distribute.cluster_resolver", {
    "ClusterResolver": ClusterResolver, "SimpleClusterResolver": SimpleClusterResolver,
    "TFConfigClusterResolver": TFConfigClusterResolver, "SlurmClusterResolver": SlurmClusterResolver,
    "TPUClusterResolver": TPUClusterResolver,
})

coordinator = _namespace("tf.distribute.coordinator", {}, lazy=_COORDINATOR)

experimental = _namespace("tf.distribute.experimental", {
    "CommunicationOptions": CommunicationOptions, "CommunicationImplementation": CommunicationImplementation,
    "CollectiveCommunication": CollectiveCommunication, "CentralStorageStrategy": CentralStorageStrategy,
    "MultiWorkerMirroredStrategy": _experimental_multi_worker, "TPUStrategy": TPUStrategy,
    "ValueContext": ValueContext, "coordinator": coordinator,
    "partitioners": _namespace("tf.distribute.experimental.partitioners", {
        "FixedShardsPartitioner": FixedShardsPartitioner, "MaxSizePartitioner": MaxSizePartitioner,
        "MinSizePartitioner": MinSizePartitioner}),
}, lazy=_PS_STRATEGY)
__getattr__ = module_getattr("tf.distribute", _PS_STRATEGY, _COORDINATOR)

__all__ = [
    "CentralStorageStrategy", "CollectiveCommunication", "CrossDeviceOps", "DistributedDataset",
    "HierarchicalCopyAllReduce", "InputContext", "InputOptions", "MirroredStrategy", "MultiWorkerMirroredStrategy",
    "NcclAllReduce", "OneDeviceStrategy", "ParameterServerStrategy", "PerReplica", "ReduceOp", "ReductionToOneDevice",
    "ReplicaContext", "Strategy", "TPUStrategy", "cluster_resolver", "coordinator", "experimental",
    "get_replica_context", "get_strategy", "has_strategy", "in_cross_replica_context",
]
