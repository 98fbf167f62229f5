"""tf.data-style input pipelines. For now: the distributed dataset a strategy returns."""

from stratagem.data.distributed import DistributedDataset

__all__ = ["DistributedDataset"]
