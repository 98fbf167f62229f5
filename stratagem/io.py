"""``stratagem.io``: TF's ``tf.io`` names for files and ``tf.train.Example`` records (from ``stratagem.data``)."""

from stratagem.data.example_parsing import (FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, decode_raw,
                                            parse_example, parse_single_example)
from stratagem.data.tensor_ops import read_file
from stratagem.data.tfrecord_format import TFRecordOptions, TFRecordWriter

__all__ = [
    "FixedLenFeature", "FixedLenSequenceFeature", "TFRecordOptions", "TFRecordWriter", "VarLenFeature", "decode_raw",
    "parse_example", "parse_single_example", "read_file",
]
