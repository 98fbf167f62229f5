"""tf.data-style input pipelines; splitting one across replicas is ``stratagem.distribute.input_lib``'s, as in TF."""

from stratagem.data import experimental
from stratagem.data.dataset import Dataset
from stratagem.data.ops.files import TextLineDataset
from stratagem.data.ops.tfrecord import TFRecordDataset
from stratagem.data.image import image_dataset_from_directory
from stratagem.data.options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, AutoShardPolicy, Options
from stratagem.data.seed import set_seed

__all__ = [
    "AUTOTUNE", "AutoShardPolicy", "Dataset", "INFINITE_CARDINALITY", "Options",
    "TFRecordDataset", "TextLineDataset", "UNKNOWN_CARDINALITY", "experimental", "image_dataset_from_directory", "set_seed",
]
