"""list_files and TextLineDataset: globbing, per-epoch file shuffles, lines as bytes, seeks, file shards."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from stratagem.data import Dataset, TextLineDataset
from stratagem.data.ops.files import ListFilesDataset
from stratagem.errors import DataLossError
from stratagem.testing.data import assert_checkpoint_roundtrip


def _names(ds: Dataset) -> list[str]:
    return [Path(os.fsdecode(name)).name for name in ds]


@pytest.fixture
def text_files(tmp_path: Path) -> list[str]:
    contents = {"a.txt": b"a1\na2\n", "b.txt": b"b1\r\n\r\nb3", "c.txt": b"", "d.txt": b"d1\n"}
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "notes.md").write_bytes(b"x\n")
    return [str(tmp_path / name) for name in contents]


# ---- list_files -------------------------------------------------------------------------------
def test_list_files_unshuffled_is_sorted_bytes_scalars(tmp_path: Path, text_files: list[str]) -> None:
    ds = Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False)
    elements = list(ds)
    assert all(isinstance(name, bytes) for name in elements)  # tf.string elements are bytes, as in TF
    assert _names(ds) == ["a.txt", "b.txt", "c.txt", "d.txt"]
    assert ds.cardinality() == 4
    assert_checkpoint_roundtrip(ds)


def test_list_files_merges_patterns_without_duplicates(tmp_path: Path, text_files: list[str]) -> None:
    ds = Dataset.list_files([str(tmp_path / "*.md"), str(tmp_path / "[ab].txt"), str(tmp_path / "a.*")], shuffle=False)
    assert _names(ds) == ["a.txt", "b.txt", "notes.md"]


def test_list_files_shuffles_by_default_and_each_epoch(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"f{i:02d}").write_bytes(b"")
    ds = Dataset.list_files(str(tmp_path / "f*"), seed=4)
    first, second = _names(ds), _names(ds)
    assert sorted(first) == sorted(second) == [f"f{i:02d}" for i in range(12)]
    assert first != second and first != sorted(first)
    again = Dataset.list_files(str(tmp_path / "f*"), seed=4)
    assert _names(again.iterator(epoch=0)) == _names(ds.iterator(epoch=0))
    assert_checkpoint_roundtrip(Dataset.list_files(str(tmp_path / "f*")))


def test_list_files_no_match_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="No files matched pattern: .*missing-\\*"):
        Dataset.list_files(str(tmp_path / "missing-*"))


def test_list_files_reads_files_through_transformations(tmp_path: Path, text_files: list[str]) -> None:
    ds = Dataset.list_files(str(tmp_path / "*.txt"))
    assert ds._reads_files() and ds.map(lambda x: x).batch(2)._reads_files()
    assert not Dataset.range(3)._reads_files()


def test_list_files_shards_are_disjoint_and_cover(tmp_path: Path, text_files: list[str]) -> None:
    ds = Dataset.list_files(str(tmp_path / "*.txt"), seed=1)
    assert isinstance(ds, ListFilesDataset)
    shards = [_names(ds.with_files_shard(3, i)) for i in range(3)]
    assert sorted(shards[0]) == ["a.txt", "d.txt"] and shards[1] == ["b.txt"] and shards[2] == ["c.txt"]
    assert len(list(ds)) == 4  # the original is unchanged


def test_list_files_more_shards_than_files_raises_value_error(tmp_path: Path, text_files: list[str]) -> None:
    ds = Dataset.list_files(str(tmp_path / "*.txt"))
    with pytest.raises(ValueError, match="num_files=4, num_shards=5"):
        ds.with_files_shard(5, 0)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="index=2"):
        ds.with_files_shard(2, 2)  # type: ignore[attr-defined]


# ---- TextLineDataset ---------------------------------------------------------------------------------
def test_text_lines_are_bytes_without_line_endings(text_files: list[str]) -> None:
    ds = TextLineDataset(text_files)
    assert isinstance(ds, TextLineDataset)
    lines = list(ds)
    assert all(isinstance(line, bytes) for line in lines)
    assert lines == [b"a1", b"a2", b"b1", b"", b"b3", b"d1"]
    assert ds.cardinality() == -2 and ds._reads_files()
    assert_checkpoint_roundtrip(ds)


def test_text_lines_of_one_file_name(text_files: list[str]) -> None:
    assert list(TextLineDataset(text_files[0])) == [b"a1", b"a2"]
    assert list(TextLineDataset([])) == []


def test_text_lines_of_gzip_files(tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        path = tmp_path / f"part{i}.gz"
        with gzip.open(path, "wb") as f:
            f.write(f"x{i}\ny{i}\n".encode())
        paths.append(str(path))
    ds = TextLineDataset(paths, compression_type="GZIP")
    assert list(ds) == [b"x0", b"y0", b"x1", b"y1"]
    assert_checkpoint_roundtrip(ds)


def test_text_lines_from_dataset_of_names(tmp_path: Path, text_files: list[str]) -> None:
    names = Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False)
    assert list(TextLineDataset(names)) == [b"a1", b"a2", b"b1", b"", b"b3", b"d1"]
    shuffled = TextLineDataset(Dataset.list_files(str(tmp_path / "*.txt")))
    assert sorted(shuffled) == sorted([b"a1", b"a2", b"b1", b"", b"b3", b"d1"])
    assert_checkpoint_roundtrip(shuffled)
    assert_checkpoint_roundtrip(TextLineDataset(Dataset.from_tensor_slices(np.array(text_files[:2]))))


def test_text_line_state_seeks_to_byte_offset(text_files: list[str]) -> None:
    iterator = iter(TextLineDataset(text_files))
    for _ in range(3):
        next(iterator)
    assert iterator.get_state() == {"file_index": 1, "offset": 4}  # after b"b1\r\n"
    restored = iter(TextLineDataset(text_files))
    restored.set_state({"file_index": 1, "offset": 6})  # jump straight past the empty line
    assert list(restored) == [b"b3", b"d1"]


def test_text_line_file_shards_cover_every_file(tmp_path: Path, text_files: list[str]) -> None:
    ds = TextLineDataset(text_files)
    assert [list(ds.with_files_shard(2, i)) for i in range(2)] == [[b"a1", b"a2"], [b"b1", b"", b"b3", b"d1"]]
    names = TextLineDataset(Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False))
    assert sorted(line for i in range(2) for line in names.with_files_shard(2, i)) == sorted(ds)
    generic = TextLineDataset(Dataset.from_tensor_slices(np.array(text_files)))
    assert list(generic.with_files_shard(4, 3)) == [b"d1"]
    with pytest.raises(ValueError, match="num_files=4, num_shards=6"):
        generic.with_files_shard(6, 0)
    with pytest.raises(ValueError, match="num_files=4, num_shards=5"):
        ds.with_files_shard(5, 1)


def test_text_line_unsupported_compression_raises_value_error(text_files: list[str]) -> None:
    with pytest.raises(ValueError, match="compression_type='BZIP2'"):
        TextLineDataset(text_files, compression_type="BZIP2")


def test_text_lines_of_zlib_files_resume_at_their_offset(tmp_path: Path) -> None:
    # TF's TextLineDataset reads ZLIB streams too (one decompression path with TFRecordDataset's).
    path = tmp_path / "lines.z"
    path.write_bytes(zlib.compress(b"x0\ny0\nz0"))
    ds = TextLineDataset(str(path), compression_type="ZLIB")
    assert list(ds) == [b"x0", b"y0", b"z0"]
    iterator = iter(ds)
    next(iterator)
    restored = iter(ds)
    restored.set_state(iterator.get_state())
    assert list(restored) == [b"y0", b"z0"]


def test_compressed_text_past_its_end_or_corrupt_raises_data_loss_error(tmp_path: Path) -> None:
    path = tmp_path / "lines.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"a\nb\n")
    iterator = iter(TextLineDataset(str(path), compression_type="GZIP"))
    iterator.set_state({"file_index": 0, "offset": 100})
    with pytest.raises(DataLossError, match="at offset 100: the file ends at 4"):
        next(iterator)
    bad = tmp_path / "bad.z"
    bad.write_bytes(zlib.compress(b"x\n" * 100)[:2] + b"\xff" * 20)
    with pytest.raises(DataLossError, match="Corrupted compressed text file"):
        list(TextLineDataset(str(bad), compression_type="ZLIB"))


def test_text_line_filenames_of_wrong_type_raise_type_error() -> None:
    with pytest.raises(TypeError, match="filenames of type int"):
        TextLineDataset(3)  # type: ignore[arg-type]


def test_text_line_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        list(TextLineDataset(str(tmp_path / "nope.txt")))
