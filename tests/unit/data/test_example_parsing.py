"""tf.train.Example messages and parse_example / parse_single_example / decode_raw against TensorFlow 2.21's output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stratagem.train as train
from stratagem.data import AUTOTUNE, TFRecordDataset
from stratagem.io import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    decode_raw,
    parse_example,
    parse_single_example,
)

FIXTURES = Path(__file__).parent / "tfrecord_fixtures"
TF_OUTPUT = json.loads((FIXTURES / "parsed.json").read_text())
TF_RECORDS = [bytes.fromhex(r) for r in TF_OUTPUT["records_hex"]]
VALUES = json.loads((FIXTURES / "values.json").read_text())
# The spec make_fixtures.py gave tf.io.parse_example, in stratagem's names (TF's dtypes by name).
SPEC = {
    "label": FixedLenFeature([], "int64"),
    "weights": FixedLenFeature([3], "float32"),
    "image": FixedLenFeature([], "string"),
    "score": FixedLenFeature([], np.float32, default_value=-1.0),
    "tokens": VarLenFeature(np.int64),
    "names": VarLenFeature("string"),
    "frames": FixedLenSequenceFeature([2], "float32", allow_missing=True),
}


def _feature(kind: str, values: list[Any]) -> Any:
    if kind == "int64":
        return train.Feature(int64_list=train.Int64List(value=values))
    if kind == "float":
        return train.Feature(float_list=train.FloatList(value=values))
    return train.Feature(bytes_list=train.BytesList(value=[bytes.fromhex(v) for v in values]))


def _example(values: dict[str, list[Any]]) -> Any:
    return train.Example(features=train.Features(feature={key: _feature(*kv) for key, kv in values.items()}))


def _bits(array: np.ndarray) -> list[Any]:
    """Float32 values as their bit patterns (so -0.0, inf and denormals compare exactly), bytes as hex."""
    if array.dtype == np.float32:
        return np.ascontiguousarray(array).view(np.uint32).tolist()  # type: ignore[no-any-return]
    if array.dtype == object:
        return [row.hex() if isinstance(row, bytes) else _bits(row) for row in array]
    return array.tolist()  # type: ignore[no-any-return]


def _unpadded(values: np.ndarray, lengths: np.ndarray) -> list[Any]:
    return [_bits(row[:length]) for row, length in zip(values, lengths)]


# ---- the messages ------------------------------------------------------------------------------
def test_examples_built_here_serialize_to_tensorflows_bytes() -> None:
    mine = [_example(values).SerializeToString(deterministic=True) for values in VALUES]
    assert mine == TF_RECORDS  # deterministic on both sides: TF's files hold the same bytes
    parsed = train.Example.FromString(TF_RECORDS[1])
    assert list(parsed.features.feature["weights"].float_list.value) == [3.4028234663852886e38, -1.5, 2.0]
    assert parsed.features.feature["image"].WhichOneof("kind") == "bytes_list"
    assert train.Example.DESCRIPTOR.full_name == "tensorflow.Example"


def test_sequence_example_round_trips() -> None:
    sequence = train.SequenceExample(
        context=train.Features(feature={"id": _feature("int64", [4])}),
        feature_lists=train.FeatureLists(feature_list={"t": train.FeatureList(feature=[_feature("float", [1.5])])}),
    )
    again = train.SequenceExample.FromString(sequence.SerializeToString())
    assert again.feature_lists.feature_list["t"].feature[0].float_list.value[0] == 1.5


# ---- parse_example against TF -----------------------------------------------------------------
def test_parse_example_matches_tensorflow_exactly() -> None:
    parsed = parse_example(np.array(TF_RECORDS, dtype=object), SPEC)
    expected = TF_OUTPUT["parsed"]
    assert parsed["label"].dtype == np.int64 and parsed["weights"].dtype == np.float32
    assert parsed["image"].dtype == object and parsed["weights"].shape == (4, 3)
    for key in ("label", "weights", "image", "score"):
        assert _bits(parsed[key]) == expected[key], key
    assert _unpadded(parsed["tokens"], parsed["tokens_lengths"]) == expected["tokens"]
    assert _unpadded(parsed["names"], parsed["names_lengths"]) == expected["names"]
    assert parsed["tokens"].shape == (4, 3) and parsed["tokens_lengths"].tolist() == [3, 0, 0, 1]
    assert parsed["names"][2].tolist() == [b"", b""]  # VarLen padding: b"" for strings, 0 for numbers
    assert _bits(parsed["frames"]) == expected["frames"]  # TF pads the sequences with zeros as well


def test_parse_single_example_matches_each_row_of_tensorflows_batch() -> None:
    expected = TF_OUTPUT["parsed"]
    for index, record in enumerate(TF_RECORDS):
        parsed = parse_single_example(record, SPEC)
        assert _bits(parsed["weights"]) == expected["weights"][index]
        assert int(parsed["label"]) == expected["label"][index]
        assert _bits(parsed["tokens"]) == expected["tokens"][index]
        assert int(parsed["names_lengths"]) == len(expected["names"][index])
        frames = expected["frames"][index][:len(parsed["frames"])]
        assert _bits(parsed["frames"]) == frames and parsed["frames"].shape[1:] == (2,)


def test_parsing_in_a_pipeline_with_parallel_map() -> None:
    path = str(FIXTURES / "examples.gz.tfrecord")
    spec = {"label": SPEC["label"], "image": SPEC["image"]}
    ds = TFRecordDataset(path, "GZIP").batch(3).map(lambda records: parse_example(records, spec),
                                                    num_parallel_calls=AUTOTUNE)
    batches = list(ds)
    assert [b["label"].tolist() for b in batches] == [TF_OUTPUT["parsed"]["label"][:3], TF_OUTPUT["parsed"]["label"][3:]]
    pixels = [decode_raw(b["image"], "uint8") for b in batches]
    assert pixels[0].shape == (3, 4) and pixels[0][0].tolist() == [0, 255, 16, 0]


# ---- parse errors ------------------------------------------------------------------------------
def test_missing_required_feature_raises_naming_key_and_example() -> None:
    with pytest.raises(ValueError, match="Feature: score \\(data type: float\\) is required .* example 1"):
        parse_example(TF_RECORDS, {"score": FixedLenFeature([], "float32")})


def test_wrong_type_or_count_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Data type: int64 but expected type: float"):
        parse_single_example(TF_RECORDS[0], {"label": FixedLenFeature([], "float32")})
    with pytest.raises(ValueError, match="Values size: 3 but output shape: \\[2\\]"):
        parse_single_example(TF_RECORDS[0], {"weights": FixedLenFeature([2], "float32")})
    with pytest.raises(ValueError, match="multiple of 3"):
        parse_example(TF_RECORDS, {"frames": FixedLenSequenceFeature([3], "float32", allow_missing=True)})


def test_bad_specs_and_records_raise() -> None:
    with pytest.raises(ValueError, match="float32, int64 or string"):
        parse_example(TF_RECORDS, {"label": FixedLenFeature([], "float64")})
    with pytest.raises(ValueError, match="allow_missing=True"):
        parse_example(TF_RECORDS, {"frames": FixedLenSequenceFeature([2], "float32")})
    with pytest.raises(ValueError, match="default_value must have shape \\[3\\]"):
        parse_example(TF_RECORDS, {"weights": FixedLenFeature([3], "float32", default_value=[1.0, 2.0])})
    with pytest.raises(ValueError, match="'tokens_lengths'"):
        parse_example(TF_RECORDS, {"tokens": VarLenFeature("int64"), "tokens_lengths": VarLenFeature("int64")})
    with pytest.raises(ValueError, match="Could not parse example input 0"):
        parse_example([b"\xff\xff\xff"], {"label": SPEC["label"]})
    with pytest.raises(TypeError, match="FixedLenFeature, VarLenFeature"):
        parse_example(TF_RECORDS, {"label": "int64"})


def test_defaults_fill_missing_features_per_example() -> None:
    spec = {"score": FixedLenFeature([], "float32", default_value=7.5),
            "pair": FixedLenFeature([2], "int64", default_value=[4, 5]),
            "tag": FixedLenFeature([], "string", default_value=b"none")}
    parsed = parse_example(TF_RECORDS, spec)
    assert parsed["score"].tolist() == [0.25, 7.5, -2.5, 7.5]
    assert parsed["pair"].tolist() == [[4, 5]] * 4 and parsed["tag"].tolist() == [b"none"] * 4


# ---- decode_raw --------------------------------------------------------------------------------
def test_decode_raw_types_byte_orders_and_fixed_length() -> None:
    data = np.array([1.5, -2.0], dtype="<f4").tobytes()
    assert decode_raw(data, "float32").tolist() == [1.5, -2.0]
    assert decode_raw(np.array([1.5, -2.0], dtype=">f4").tobytes(), np.float32, little_endian=False).tolist() == \
        [1.5, -2.0]
    assert decode_raw(b"\x01\x02\x03", "uint8", fixed_length=4).tolist() == [1, 2, 3, 0]
    assert decode_raw([b"\x01\x00", b"\x02\x00"], "int16").tolist() == [[1], [2]]
    with pytest.raises(ValueError, match="not a multiple of 4"):
        decode_raw(b"\x01\x02\x03", "float32")
    with pytest.raises(ValueError, match="one length"):
        decode_raw([b"\x01", b"\x01\x02"], "uint8")
