"""tf.data-style input pipelines: ``Dataset``, ``Options``, ``AUTOTUNE``, distributed datasets."""

from stratagem.data.dataset import Dataset, TextLineDataset
from stratagem.data.distributed import DistributedDataset
from stratagem.data.image import image_dataset_from_directory
from stratagem.data.options import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    AutoShardPolicy,
    Options,
)

__all__ = [
    "AUTOTUNE", "AutoShardPolicy", "Dataset", "DistributedDataset", "INFINITE_CARDINALITY", "Options",
    "TextLineDataset", "UNKNOWN_CARDINALITY", "image_dataset_from_directory",
]
