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


def test_tf_data_guide_write_read_parse_through_tf_names(tmp_path: Path) -> None:
    # The TF data guide's TFRecord round trip, as a TF user writes it.
    path = str(tmp_path / "data.tfrecord")
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for label in range(5):
            writer.write(_example(label, [float(label)] * 3))
    spec = {"label": tf.io.FixedLenFeature([], tf.int64), "weights": tf.io.FixedLenFeature([3], tf.float32),
            "image": tf.io.FixedLenFeature([], tf.string), "tokens": tf.io.VarLenFeature(tf.int64),
            "steps": tf.io.FixedLenSequenceFeature([], tf.float32, allow_missing=True)}
    ds = tf.data.TFRecordDataset([path], compression_type="GZIP", num_parallel_reads=tf.data.AUTOTUNE)
    parsed = list(ds.map(lambda record: tf.io.parse_single_example(record, spec)))
    assert [int(p["label"]) for p in parsed] == list(range(5))
    assert parsed[4]["weights"].tolist() == [4.0, 4.0, 4.0] and parsed[0]["tokens"].tolist() == []
    batch = next(iter(ds.batch(5).map(lambda records: tf.io.parse_example(records, spec))))
    assert batch["label"].tolist() == list(range(5)) and batch["tokens_lengths"].tolist() == [0] * 5
    assert tf.io.decode_raw(batch["image"], tf.uint8).tolist() == [[0, 1]] * 5


def test_damaged_record_raises_tf_errors_data_loss_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(_example(1, [1.0]))
    raw = bytearray(path.read_bytes())
    raw[-6] ^= 0x10
    path.write_bytes(bytes(raw))
    try:
        list(tf.data.TFRecordDataset(str(path)))
    except tf.errors.DataLossError as err:
        assert "offset 0" in str(err) and str(path) in str(err)
    else:
        raise AssertionError("a damaged record was read without an error")
