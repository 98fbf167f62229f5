"""Parameter-server building blocks: variable partitioners, the tensor wire format, server and client.

``ParameterServerStrategy`` and ``ClusterCoordinator`` are built on these.
"""

from stratagem.distribute.ps.partitioners import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner

__all__ = ["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner"]
