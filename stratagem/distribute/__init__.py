"""Strategies: how replicas are placed and kept in sync (the tf.distribute surface)."""

from stratagem.distribute.cluster import (
    ClusterResolver,
    ClusterSpec,
    SimpleClusterResolver,
    SlurmClusterResolver,
    TFConfigClusterResolver,
    TorchrunClusterResolver,
    resolve_cluster,
)
from stratagem.distribute.central_storage import CentralStorageStrategy
from stratagem.distribute.context import get_strategy, has_strategy
from stratagem.distribute.input_context import InputContext
from stratagem.distribute.input_lib import DistributedDataset, InputOptions
from stratagem.distribute.capabilities import (
    AppliesUpdates, StrategyOptimizer, HoldsRemoteState, SchedulesSteps, ShardsVariables, SupportsNoSync,
)
from stratagem.distribute.compression import PowerSGD
from stratagem.distribute.mirrored import MirroredStrategy
from stratagem.distribute.multi_worker import MultiWorkerMirroredStrategy
from stratagem.distribute.one_device import OneDeviceStrategy
from stratagem.distribute.options import CommunicationImplementation, CommunicationOptions
from stratagem.distribute.sharded_data_parallel import ShardedDataParallelStrategy
from stratagem.distribute.ps.partitioners import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner
from stratagem.distribute.strategy import Strategy
from stratagem.distribute.values import PerReplica, ReduceOp

# The parameter-server pieces need grpcio (the "ps" extra): imported on first use.
_LAZY = {
    "ParameterServerStrategy": "stratagem.distribute.parameter_server",
    "ClusterCoordinator": "stratagem.distribute.coordinator",
    "RemoteValue": "stratagem.distribute.coordinator",
    "PerWorkerValues": "stratagem.distribute.coordinator",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'stratagem.distribute' has no attribute {name!r}")


__all__ = [
    "AppliesUpdates", "DistributedDataset", "PowerSGD", "SupportsNoSync", "InputOptions", "StrategyOptimizer", "HoldsRemoteState", "SchedulesSteps",
    "CentralStorageStrategy", "ClusterCoordinator", "ParameterServerStrategy", "PerWorkerValues", "RemoteValue", "ClusterResolver", "ClusterSpec", "CommunicationImplementation", "CommunicationOptions", "FixedShardsPartitioner", "InputContext", "MaxSizePartitioner", "MinSizePartitioner",
    "MirroredStrategy", "MultiWorkerMirroredStrategy", "OneDeviceStrategy", "PerReplica", "ReduceOp",
    "ShardedDataParallelStrategy", "ShardsVariables", "SimpleClusterResolver", "SlurmClusterResolver", "Strategy", "TFConfigClusterResolver",
    "TorchrunClusterResolver", "get_strategy", "has_strategy", "resolve_cluster",
]
