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
from stratagem.distribute.mirrored import MirroredStrategy
from stratagem.distribute.multi_worker import MultiWorkerMirroredStrategy
from stratagem.distribute.one_device import OneDeviceStrategy
from stratagem.distribute.options import CommunicationImplementation, CommunicationOptions
from stratagem.distribute.strategy import Strategy
from stratagem.distribute.values import PerReplica, ReduceOp

__all__ = [
    "CentralStorageStrategy", "ClusterResolver", "ClusterSpec", "CommunicationImplementation", "CommunicationOptions", "InputContext",
    "MirroredStrategy", "MultiWorkerMirroredStrategy", "OneDeviceStrategy", "PerReplica", "ReduceOp",
    "SimpleClusterResolver", "SlurmClusterResolver", "Strategy", "TFConfigClusterResolver",
    "TorchrunClusterResolver", "get_strategy", "has_strategy", "resolve_cluster",
]
