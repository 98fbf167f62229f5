"""Writes this folder's TFRecord fixtures with real TensorFlow (run once, by hand; TF is never a dependency).

    /path/to/tf-venv/bin/python tests/unit/data/tfrecord_fixtures/make_fixtures.py

Writes ``values.json`` (the examples' feature values), ``examples{,.gz,.zlib}.tfrecord`` (those
examples as tf.train.Example records, written by tf.io.TFRecordWriter plain, GZIP and ZLIB) and
``parsed.json`` (the records' bytes, TF's version, and what tf.io.parse_example returns for them under ``SPEC`` below; float32 values as
their uint32 bit patterns, bytes as hex, VarLenFeature as per-example value lists).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent
FILES = {"": "examples.tfrecord", "GZIP": "examples.gz.tfrecord", "ZLIB": "examples.zlib.tfrecord"}

# Each example: key -> (kind, values); kinds are TF's Feature fields. Keys absent from an example are missing.
VALUES = [
    {"label": ["int64", [3]], "weights": ["float", [0.5, -0.0, 1e-45]], "image": ["bytes", ["00ff1000"]],
     "tokens": ["int64", [1, 2, 3]], "names": ["bytes", ["616c696365", ""]], "frames": ["float", [1.0, 2.0]],
     "score": ["float", [0.25]]},
    {"label": ["int64", [-9223372036854775808]], "weights": ["float", [3.4028234663852886e38, -1.5, 2.0]],
     "image": ["bytes", ["ffffff00"]], "tokens": ["int64", []], "names": ["bytes", ["626f62"]],
     "frames": ["float", [3.0, 4.0, 5.0, 6.0]]},
    {"label": ["int64", [9223372036854775807]], "weights": ["float", [float("inf"), float("-inf"), 7.0]],
     "image": ["bytes", ["01020304"]], "frames": ["float", []], "score": ["float", [-2.5]]},
    # The last record ends in zero bytes (its sorted-last float is 0.0): a batch of records must keep them.
    {"label": ["int64", [0]], "weights": ["float", [1.0, 2.0, 0.0]], "image": ["bytes", ["00000000"]],
     "tokens": ["int64", [7]], "names": ["bytes", ["00", "6e756c6c00"]], "frames": ["float", [0.5, 0.25]]},
]
SPEC = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "weights": tf.io.FixedLenFeature([3], tf.float32),
    "image": tf.io.FixedLenFeature([], tf.string),
    "score": tf.io.FixedLenFeature([], tf.float32, default_value=-1.0),
    "tokens": tf.io.VarLenFeature(tf.int64),
    "names": tf.io.VarLenFeature(tf.string),
    "frames": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True),
}


def feature(kind: str, values: list) -> tf.train.Feature:
    if kind == "int64":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if kind == "float":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes.fromhex(v) for v in values]))


def jsonable(array: np.ndarray) -> list:
    if array.dtype == np.float32:
        return np.ascontiguousarray(array).view(np.uint32).tolist()
    if array.dtype == object:
        return [[v.hex() for v in row] if isinstance(row, (list, np.ndarray)) else row.hex() for row in array.tolist()]
    return array.tolist()


def main() -> None:
    records = []
    for example in VALUES:
        proto = tf.train.Example(features=tf.train.Features(
            feature={key: feature(kind, values) for key, (kind, values) in example.items()}))
        # deterministic: map entries sorted by key. Plain SerializeToString() orders a map by a hash that
        # protobuf (upb) seeds per process, in TF as in stratagem, so its bytes differ from run to run.
        records.append(proto.SerializeToString(deterministic=True))
    for compression, name in FILES.items():
        with tf.io.TFRecordWriter(str(HERE / name), tf.io.TFRecordOptions(compression_type=compression)) as writer:
            for record in records:
                writer.write(record)
    parsed = tf.io.parse_example(tf.constant(records), SPEC)
    out = {}
    for key, value in parsed.items():
        if isinstance(value, tf.SparseTensor):
            rows = [[] for _ in records]
            for (row, _), v in zip(value.indices.numpy().tolist(), value.values.numpy()):
                rows[row].append(v)
            out[key] = [jsonable(np.array(r, dtype=value.values.dtype.as_numpy_dtype)) if value.dtype != tf.string
                        else [b.hex() for b in r] for r in rows]
        else:
            out[key] = jsonable(value.numpy())
    (HERE / "values.json").write_text(json.dumps(VALUES, indent=1) + "\n")
    (HERE / "parsed.json").write_text(json.dumps({"tensorflow": tf.__version__, "records_hex": [r.hex() for r in records],
                                                  "parsed": out}, indent=1) + "\n")
    print("wrote", sorted(p.name for p in HERE.iterdir()), file=sys.stderr)


if __name__ == "__main__":
    main()
