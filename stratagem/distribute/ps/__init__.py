"""Parameter-server building blocks under ``ParameterServerStrategy`` and ``ClusterCoordinator``.

``partitioners`` (TF's three), ``wire`` (JSON header + raw tensor bytes, no
pickling), ``server`` / ``client`` (the variables and their optimizer state,
over gRPC), ``serve`` (a ``ps`` task's entry point), ``coordination`` /
``coordination_client`` (the chief's step queue and the workers' line to
it) and ``results`` (scheduled steps' return values on the wire).
"""

from stratagem.distribute.ps.partitioners import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner

__all__ = ["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner"]
