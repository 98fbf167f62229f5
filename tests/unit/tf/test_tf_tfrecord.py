"""TF's TFRecord names through ``import stratagem.tf as tf``: the TF data guide's write-then-read code."""

from __future__ import annotations

import json
from pathlib import Path

import stratagem.tf as tf

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "tfrecord_fixtures"


def _example(label: int, weights: list[float]) -> bytes:
    feature = {
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights)),
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x00\x01"])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def test_tf_train_example_builds_tensorflows_message() -> None:
    record = _example(3, [0.5, -0.0, 1e-45])
    again = tf.train.Example.FromString(record)
    assert again.features.feature["label"].int64_list.value[0] == 3
    assert tf.train.Example.DESCRIPTOR.full_name == "tensorflow.Example"
    tf_records = json.loads((FIXTURES / "parsed.json").read_text())["records_hex"]
    assert len(tf_records) == 4 and all(isinstance(tf.train.Example.FromString(bytes.fromhex(r)), tf.train.Example)
                                        for r in tf_records)
