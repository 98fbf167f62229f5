"""``MultiWorkerMirroredStrategy``: synchronous all-reduce across hosts.

The job's shape comes from a cluster resolver: explicit, ``TF_CONFIG``, torchrun's variables or SLURM's
(``stratagem.distribute.cluster``). Every chief and worker task is one replica; ``ps`` tasks belong to
``ParameterServerStrategy``.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from stratagem.distribute._collective import CollectiveStrategy
from stratagem.distribute.cluster import ClusterResolver, resolve_cluster
from stratagem.distribute.one_device import replica_device
from stratagem.distribute.options import CommunicationOptions
from stratagem.errors import ConfigurationError


class WorkerClusterStrategy(CollectiveStrategy):
    """A collective strategy whose replicas are one per worker process of a cluster (TF_CONFIG, torchrun, SLURM)."""

    def __init__(self, cluster_resolver: ClusterResolver | None = None,
                 communication_options: CommunicationOptions | None = None) -> None:
        super().__init__(cluster_resolver=cluster_resolver or resolve_cluster(), communication_options=communication_options)

    @override
    def _resolve(self) -> tuple[int, int, int, int, str, int, torch.device]:
        return resolve_workers(self._cluster_resolver, type(self).__name__)


class MultiWorkerMirroredStrategy(WorkerClusterStrategy):
    """Synchronous data parallelism over the workers of a cluster.

    Constructing it joins the job: it waits (up to the communication timeout) until every worker has started, as
    TensorFlow's does.

    Args:
        cluster_resolver: Where the cluster comes from; default: ``TF_CONFIG``, then torchrun's variables, then
            SLURM's, else a single worker.
        communication_options: ``CommunicationOptions`` (timeout, buckets, backend).

    Example:
        >>> # TF_CONFIG='{"cluster": {"worker": ["host1:2222", "host2:2222"]},
        >>> #             "task": {"type": "worker", "index": 0}}'
        >>> strategy = MultiWorkerMirroredStrategy()  # doctest: +SKIP
        >>> strategy.num_replicas_in_sync  # doctest: +SKIP
        2
    """



def resolve_workers(resolver: ClusterResolver | None, strategy_name: str) -> tuple[int, int, int, int, str, int, torch.device]:
    """This process's place among the chief and worker tasks of ``resolver``'s cluster.

    Returns (rank, world_size, local_rank, local_world_size, master_addr, master_port, device); one worker on this
    host's first device if there is no resolver. Shared by the strategies whose every chief and worker task is one
    replica.
    """
    if resolver is None:
        return 0, 1, 0, 1, "127.0.0.1", 0, replica_device(0)
    spec = resolver.cluster_spec().as_dict()
    if spec.get("ps"):
        raise ConfigurationError(
            f"The cluster has 'ps' tasks, which {strategy_name} does not use: it "
            "all-reduces among chief and worker tasks. Use ParameterServerStrategy for a cluster "
            f"with parameter servers, or remove 'ps'. Received: ps={spec['ps']!r}")
    if resolver.rank is None:
        raise ConfigurationError(
            f"This task ({resolver.task_type!r}, index {resolver.task_id}) is not a chief or worker, so "
            f"it has no replica in {strategy_name}. Run evaluator tasks without this "
            f"strategy. Received: task_type={resolver.task_type!r}")
    return (resolver.rank, resolver.world_size, resolver.local_rank, resolver.local_world_size,
            resolver.master_addr, resolver.master_port, replica_device(resolver.local_rank))
