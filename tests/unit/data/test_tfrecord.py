"""TFRecordDataset and TFRecordWriter against files TensorFlow 2.21 wrote (tfrecord_fixtures/), CRC checks, resume."""

from __future__ import annotations

import json
from pathlib import Path
import numpy as np
import numpy as np
import pytest

from stratagem.data import AUTOTUNE, Dataset, TFRecordDataset
from stratagem.data.tfrecord_format import masked_crc32c
from stratagem.errors import DataLossError
from stratagem.io import TFRecordOptions, TFRecordWriter
from stratagem.testing.data import assert_checkpoint_roundtrip

FIXTURES = Path(__file__).parent / "tfrecord_fixtures"
FILES = {"": "examples.tfrecord", "GZIP": "examples.gz.tfrecord", "ZLIB": "examples.zlib.tfrecord"}
TF_RECORDS = [bytes.fromhex(r) for r in json.loads((FIXTURES / "parsed.json").read_text())["records_hex"]]


def _write(path: Path, records: list[bytes], compression: str | None = None) -> str:
    with TFRecordWriter(str(path), compression) as writer:
        for record in records:
            writer.write(record)
    return str(path)


@pytest.fixture
def numbered_files(tmp_path: Path) -> list[str]:
    """Three files of records b"<file>:<index>" (3, 0 and 4 records; the empty file on purpose)."""
    counts = [3, 0, 4]
    return [_write(tmp_path / f"part-{f}.tfrecord", [f"{f}:{i}".encode() for i in range(n)])
            for f, n in enumerate(counts)]


# ---- TensorFlow's files -----------------------------------------------------------------------
@pytest.mark.parametrize("compression", list(FILES))
def test_files_written_by_tensorflow_read_back_its_records(compression: str) -> None:
    ds = TFRecordDataset(str(FIXTURES / FILES[compression]), compression_type=compression or None)
    records = list(ds)
    assert all(type(record) is bytes for record in records)
    assert records == TF_RECORDS
    assert records[-1].endswith(b"\x00")  # the last record ends in a zero byte: kept, in a batch too
    batch = next(iter(ds.batch(len(TF_RECORDS))))
    assert batch.dtype == object and list(batch) == TF_RECORDS


@pytest.mark.parametrize("compression", list(FILES))
def test_writer_writes_the_bytes_tensorflow_writes(tmp_path: Path, compression: str) -> None:
    written = _write(tmp_path / "out", TF_RECORDS, compression or None)
    assert Path(written).read_bytes() == (FIXTURES / FILES[compression]).read_bytes()
    with TFRecordWriter(str(tmp_path / "opts"), TFRecordOptions(compression_type=compression)) as writer:
        for record in TF_RECORDS:
            writer.write(record)
    assert (tmp_path / "opts").read_bytes() == (FIXTURES / FILES[compression]).read_bytes()


def test_masked_crc_is_tensorflows() -> None:
    # The first record's header as TF wrote it: 8 length bytes, then their masked CRC32C.
    raw = (FIXTURES / FILES[""]).read_bytes()
    assert masked_crc32c(raw[:8]) == int.from_bytes(raw[8:12], "little")


# ---- corruption --------------------------------------------------------------------------------
def _record_offsets(records: list[bytes]) -> list[int]:
    offsets, position = [], 0
    for record in records:
        offsets.append(position)
        position += 16 + len(record)
    return offsets


def test_flipped_data_byte_raises_data_loss_naming_file_and_offset(tmp_path: Path) -> None:
    raw = bytearray((FIXTURES / FILES[""]).read_bytes())
    offset = _record_offsets(TF_RECORDS)[2]
    raw[offset + 12 + 5] ^= 0x01  # one bit inside the third record's data
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(raw))
    iterator = iter(TFRecordDataset(str(path)))
    assert [next(iterator), next(iterator)] == TF_RECORDS[:2]
    with pytest.raises(DataLossError, match=f"offset {offset} of {path}: the data's CRC32C does not match"):
        next(iterator)


def test_flipped_length_byte_raises_data_loss(tmp_path: Path) -> None:
    raw = bytearray((FIXTURES / FILES[""]).read_bytes())
    offset = _record_offsets(TF_RECORDS)[1]
    raw[offset] ^= 0x40
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(raw))
    with pytest.raises(DataLossError, match=f"offset {offset} of {path}: the length's CRC32C"):
        list(TFRecordDataset(str(path)))


def test_truncated_file_raises_data_loss(tmp_path: Path) -> None:
    raw = (FIXTURES / FILES[""]).read_bytes()
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(raw[:-3])
    with pytest.raises(DataLossError, match=f"Truncated TFRecord record at offset {_record_offsets(TF_RECORDS)[3]}"):
        list(TFRecordDataset(str(path)))


def test_compressed_file_read_as_plain_raises_data_loss() -> None:
    with pytest.raises(DataLossError, match="is compression_type right"):
        list(TFRecordDataset(str(FIXTURES / FILES["GZIP"])))


def test_ignore_errors_skips_the_rest_of_a_damaged_file(tmp_path: Path, numbered_files: list[str]) -> None:
    raw = bytearray(Path(numbered_files[0]).read_bytes())
    raw[16 + 3 + 12] ^= 0xFF  # second record's data
    Path(numbered_files[0]).write_bytes(bytes(raw))
    assert list(TFRecordDataset(numbered_files).ignore_errors()) == [b"0:0"] + [f"2:{i}".encode() for i in range(4)]


# ---- the op: order, state, shards, parallel reads -----------------------------------------------
def test_records_in_file_order_and_resume_by_file_and_offset(numbered_files: list[str]) -> None:
    ds = TFRecordDataset(numbered_files, buffer_size=5)  # reads smaller than a record, as well
    expected = [b"0:0", b"0:1", b"0:2", b"2:0", b"2:1", b"2:2", b"2:3"]
    assert list(ds) == expected and ds.cardinality() == -2 and ds._reads_files()
    iterator = iter(ds)
    for _ in range(4):
        next(iterator)
    assert iterator.get_state() == {"file_index": 2, "offset": 19}  # one 19-byte record into the third file
    assert_checkpoint_roundtrip(ds)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_records_resume_mid_file(tmp_path: Path, compression: str) -> None:
    paths = [_write(tmp_path / f"{compression}-{f}", [bytes([f, i]) * (i + 1) for i in range(5)], compression)
             for f in range(2)]
    ds = TFRecordDataset(paths, compression_type=compression, buffer_size=7)
    assert len(list(ds)) == 10
    assert_checkpoint_roundtrip(ds)


def test_list_files_source_shards_by_file(tmp_path: Path, numbered_files: list[str]) -> None:
    ds = TFRecordDataset(Dataset.list_files(str(tmp_path / "part-*.tfrecord"), seed=5))
    assert sorted(ds) == sorted(TFRecordDataset(numbered_files))
    assert_checkpoint_roundtrip(ds)
    shards = [sorted(ds.with_files_shard(2, i)) for i in range(2)]  # type: ignore[attr-defined]
    assert shards[0] == [b"0:0", b"0:1", b"0:2", b"2:0", b"2:1", b"2:2", b"2:3"] and shards[1] == []
    listed = TFRecordDataset(numbered_files)
    assert [list(listed.with_files_shard(3, i)) for i in range(3)] == \
        [[b"0:0", b"0:1", b"0:2"], [], [b"2:0", b"2:1", b"2:2", b"2:3"]]


def test_num_parallel_reads_interleaves_one_record_per_file(numbered_files: list[str]) -> None:
    ds = TFRecordDataset([numbered_files[0], numbered_files[2]], num_parallel_reads=2)
    expected = [b"0:0", b"2:0", b"0:1", b"2:1", b"0:2", b"2:2", b"2:3"]  # tf.data's deterministic order
    assert list(ds) == expected
    assert_checkpoint_roundtrip(ds)
    assert sorted(TFRecordDataset(numbered_files, num_parallel_reads=AUTOTUNE)) == sorted(expected)
    assert list(ds.with_files_shard(2, 1)) == [b"2:0", b"2:1", b"2:2", b"2:3"]  # type: ignore[attr-defined]
    names = Dataset.from_tensor_slices(np.array(numbered_files))
    assert list(TFRecordDataset(names, num_parallel_reads=3)) == [b"0:0", b"2:0", b"0:1", b"2:1", b"0:2", b"2:2",
                                                                  b"2:3"]


def test_interleave_of_list_files_and_cache(tmp_path: Path, numbered_files: list[str]) -> None:
    files = Dataset.list_files(str(tmp_path / "part-*.tfrecord"), shuffle=False)
    ds = files.interleave(lambda name: TFRecordDataset(name), cycle_length=3, block_length=2,
                          num_parallel_calls=AUTOTUNE)
    expected = [b"0:0", b"0:1", b"2:0", b"2:1", b"0:2", b"2:2", b"2:3"]
    assert list(ds) == expected
    assert_checkpoint_roundtrip(ds)
    cached = ds.cache()
    assert list(cached) == expected and list(cached) == expected


def test_bad_arguments_raise_value_error(numbered_files: list[str]) -> None:
    with pytest.raises(ValueError, match="compression_type='BZIP2'"):
        TFRecordDataset(numbered_files, compression_type="BZIP2")
    with pytest.raises(ValueError, match="buffer_size=-1"):
        TFRecordDataset(numbered_files, buffer_size=-1)
    with pytest.raises(ValueError, match="num_parallel_reads=0"):
        TFRecordDataset(numbered_files, num_parallel_reads=0)
    with pytest.raises(TypeError, match="filenames of type int"):
        TFRecordDataset(3)  # type: ignore[arg-type]


def test_writer_takes_str_and_refuses_writes_after_close(tmp_path: Path) -> None:
    writer = TFRecordWriter(str(tmp_path / "w"))
    writer.write("text")
    writer.flush()
    writer.close()
    writer.close()
    assert list(TFRecordDataset(str(tmp_path / "w"))) == [b"text"]
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"x")
    with pytest.raises(TypeError, match="type int"):
        TFRecordWriter(str(tmp_path / "v")).write(3)  # type: ignore[arg-type]
    assert TFRecordOptions.get_compression_type_string(TFRecordOptions("gzip")) == "GZIP"


def test_sync_flush_makes_records_readable_before_close(tmp_path: Path) -> None:
    path = tmp_path / "live.gz"
    writer = TFRecordWriter(str(path), TFRecordOptions(compression_type="GZIP", flush_mode="SYNC_FLUSH"))
    writer.write(b"first")
    writer.flush()
    assert list(TFRecordDataset(str(path), compression_type="GZIP")) == [b"first"]
    writer.close()
