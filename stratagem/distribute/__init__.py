"""Strategies: how replicas are placed and kept in sync (the tf.distribute surface)."""

import typing as _typing

from stratagem import _lazy_imports

if _typing.TYPE_CHECKING:
    from stratagem.distribute.capabilities import (
        AppliesUpdates, HoldsRemoteState, SchedulesSteps, ShardsVariables, StrategyOptimizer, SupportsNoSync,
    )
    from stratagem.distribute.central_storage import CentralStorageStrategy
    from stratagem.distribute.cluster import (
        ClusterResolver, ClusterSpec, SimpleClusterResolver, SlurmClusterResolver, TFConfigClusterResolver,
        TorchrunClusterResolver, resolve_cluster,
    )
    from stratagem.distribute.compression import PowerSGD
    from stratagem.distribute.context import get_strategy, has_strategy
    from stratagem.distribute.coordinator import ClusterCoordinator, PerWorkerValues, RemoteValue
    from stratagem.distribute.input_context import InputContext
    from stratagem.distribute.input_lib import DistributedDataset, InputOptions
    from stratagem.distribute.mirrored import MirroredStrategy
    from stratagem.distribute.multi_worker import MultiWorkerMirroredStrategy
    from stratagem.distribute.one_device import OneDeviceStrategy
    from stratagem.distribute.options import CommunicationImplementation, CommunicationOptions
    from stratagem.distribute.parameter_server import ParameterServerStrategy
    from stratagem.distribute.ps.partitioners import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner
    from stratagem.distribute.sharded_data_parallel import ShardedDataParallelStrategy
    from stratagem.distribute.strategy import Strategy
    from stratagem.distribute.values import PerReplica, ReduceOp

# NOTE: every name is imported on first use (PEP 562), so the torch-free modules here (cluster, job_secret,
# _interfaces) serve the launcher without importing torch; the parameter-server pieces also need grpcio (the
# "ps" extra). Name -> the module that defines it.
_ATTRIBUTES = {
    **dict.fromkeys(["AppliesUpdates", "HoldsRemoteState", "SchedulesSteps", "ShardsVariables", "StrategyOptimizer",
                     "SupportsNoSync"], "stratagem.distribute.capabilities"),
    "CentralStorageStrategy": "stratagem.distribute.central_storage",
    **dict.fromkeys(["ClusterResolver", "ClusterSpec", "SimpleClusterResolver", "SlurmClusterResolver",
                     "TFConfigClusterResolver", "TorchrunClusterResolver", "resolve_cluster"],
                    "stratagem.distribute.cluster"),
    "PowerSGD": "stratagem.distribute.compression",
    **dict.fromkeys(["get_strategy", "has_strategy"], "stratagem.distribute.context"),
    **dict.fromkeys(["ClusterCoordinator", "PerWorkerValues", "RemoteValue"], "stratagem.distribute.coordinator"),
    "InputContext": "stratagem.distribute.input_context",
    **dict.fromkeys(["DistributedDataset", "InputOptions"], "stratagem.distribute.input_lib"),
    "MirroredStrategy": "stratagem.distribute.mirrored",
    "MultiWorkerMirroredStrategy": "stratagem.distribute.multi_worker",
    "OneDeviceStrategy": "stratagem.distribute.one_device",
    **dict.fromkeys(["CommunicationImplementation", "CommunicationOptions"], "stratagem.distribute.options"),
    "ParameterServerStrategy": "stratagem.distribute.parameter_server",
    **dict.fromkeys(["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner"],
                    "stratagem.distribute.ps.partitioners"),
    "ShardedDataParallelStrategy": "stratagem.distribute.sharded_data_parallel",
    "Strategy": "stratagem.distribute.strategy",
    **dict.fromkeys(["PerReplica", "ReduceOp"], "stratagem.distribute.values"),
}

__getattr__, __dir__ = _lazy_imports.hooks(__name__, globals(), _ATTRIBUTES)
__all__ = sorted(_ATTRIBUTES)
