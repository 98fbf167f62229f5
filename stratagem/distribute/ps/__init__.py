"""Parameter-server building blocks under ``ParameterServerStrategy`` and ``ClusterCoordinator`` (over gRPC)."""

from stratagem.distribute.ps.partitioners import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner

__all__ = ["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner"]
