"""Tests of stratagem.datasets.idx: IDX round trips and corrupt-file errors."""

from __future__ import annotations

import gzip
import pathlib
import struct

import numpy as np
import pytest

from stratagem.datasets import idx

_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]


def _sample_array(dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        # Include the extremes so that sign and byte order mistakes show.
        values = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
        values.flat[:2] = (info.min, info.max)
        return values
    return rng.standard_normal(shape).astype(dtype) * 1e3


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda dtype: np.dtype(dtype).name)
def test_written_array_reads_back_equal_for_each_dtype(
    tmp_path: pathlib.Path, dtype: type, suffix: str
) -> None:
    array = _sample_array(dtype, (3, 4, 5))
    path = tmp_path / f"array-idx3{suffix}"
    idx.write_idx(path, array)
    result = idx.read_idx(path)
    assert result.dtype == np.dtype(dtype) and result.dtype.isnative
    assert result.shape == (3, 4, 5)
    np.testing.assert_array_equal(result, array)
    assert result.flags.writeable


@pytest.mark.parametrize("shape", [(7,), (2, 3), (1, 2, 3, 4), (0, 28, 28)])
def test_written_array_of_any_ndim_reads_back_same_shape(
    tmp_path: pathlib.Path, shape: tuple[int, ...]
) -> None:
    array = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    idx.write_idx(tmp_path / "a.idx", array)
    np.testing.assert_array_equal(idx.read_idx(tmp_path / "a.idx"), array)


def test_gz_suffix_writes_gzip_and_plain_name_writes_raw(tmp_path: pathlib.Path) -> None:
    array = np.arange(6, dtype=np.uint8).reshape(2, 3)
    idx.write_idx(tmp_path / "a.gz", array)
    idx.write_idx(str(tmp_path / "a"), array)
    raw = (tmp_path / "a").read_bytes()
    assert gzip.decompress((tmp_path / "a.gz").read_bytes()) == raw
    # Magic 00 00 08 (uint8) 02 (ndim), then big-endian dims 2 and 3, then data.
    assert raw == bytes([0, 0, 0x08, 2]) + struct.pack(">2I", 2, 3) + bytes(range(6))


def test_multi_byte_values_are_stored_big_endian(tmp_path: pathlib.Path) -> None:
    idx.write_idx(tmp_path / "a", np.array([1, 258], dtype=np.int16))
    assert (tmp_path / "a").read_bytes()[-4:] == b"\x00\x01\x01\x02"


def test_unsupported_dtype_write_raises_value_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match=r"cannot store dtype int64.*Received: array.dtype=int64"):
        idx.write_idx(tmp_path / "a", np.arange(3, dtype=np.int64))


def _write_bytes(tmp_path: pathlib.Path, content: bytes) -> pathlib.Path:
    path = tmp_path / "corrupt-idx1-ubyte"
    path.write_bytes(content)
    return path


def test_nonzero_magic_raises_value_error_naming_file(tmp_path: pathlib.Path) -> None:
    path = _write_bytes(tmp_path, b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x05")
    with pytest.raises(
        ValueError, match=r"corrupt-idx1-ubyte.*not an IDX file.*magic='01 00 08 01'"
    ):
        idx.read_idx(path)


def test_gzipped_content_without_gz_suffix_raises_value_error_with_hint(
    tmp_path: pathlib.Path,
) -> None:
    raw = bytes([0, 0, 0x08, 1]) + struct.pack(">I", 1) + b"\x05"
    path = _write_bytes(tmp_path, gzip.compress(raw))
    with pytest.raises(ValueError, match=r"looks gzipped; give it a \.gz suffix"):
        idx.read_idx(path)


def test_file_shorter_than_magic_raises_value_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match=r"not an IDX file.*Received: .*magic='00 00'"):
        idx.read_idx(_write_bytes(tmp_path, b"\x00\x00"))


def test_unknown_dtype_code_raises_value_error_listing_known_codes(
    tmp_path: pathlib.Path,
) -> None:
    path = _write_bytes(tmp_path, b"\x00\x00\x0a\x01" + struct.pack(">I", 1) + b"\x05")
    with pytest.raises(
        ValueError, match=r"corrupt-idx1-ubyte.*unknown IDX dtype code 0x0A.*0x08 \(uint8\)"
    ):
        idx.read_idx(path)


def test_missing_data_bytes_raises_truncated_value_error(tmp_path: pathlib.Path) -> None:
    path = _write_bytes(tmp_path, b"\x00\x00\x0c\x01" + struct.pack(">I", 3) + b"\x00" * 10)
    with pytest.raises(
        ValueError,
        match=r"corrupt-idx1-ubyte.*truncated.*num_data_bytes=10, num_expected_bytes=12",
    ):
        idx.read_idx(path)


def test_missing_dimension_bytes_raises_truncated_value_error(
    tmp_path: pathlib.Path,
) -> None:
    path = _write_bytes(tmp_path, b"\x00\x00\x08\x03" + struct.pack(">I", 3))
    with pytest.raises(ValueError, match=r"truncated.*16-byte header.*num_bytes=8, ndim=3"):
        idx.read_idx(path)


def test_extra_bytes_after_data_raises_trailing_bytes_value_error(
    tmp_path: pathlib.Path,
) -> None:
    path = _write_bytes(tmp_path, b"\x00\x00\x08\x01" + struct.pack(">I", 2) + b"\x01\x02\x03")
    with pytest.raises(
        ValueError,
        match=r"corrupt-idx1-ubyte.*1 trailing bytes.*num_data_bytes=3, num_expected_bytes=2",
    ):
        idx.read_idx(path)


def test_cut_short_gzip_file_raises_value_error_naming_file(tmp_path: pathlib.Path) -> None:
    idx.write_idx(tmp_path / "a.gz", np.zeros((10, 28, 28), dtype=np.uint8))
    content = (tmp_path / "a.gz").read_bytes()
    (tmp_path / "a.gz").write_bytes(content[: len(content) // 2])
    with pytest.raises(ValueError, match=r"a\.gz.*not a complete gzip file"):
        idx.read_idx(tmp_path / "a.gz")


def test_gz_suffix_on_raw_file_raises_value_error(tmp_path: pathlib.Path) -> None:
    idx.write_idx(tmp_path / "a", np.zeros(3, dtype=np.uint8))
    (tmp_path / "a").rename(tmp_path / "a.gz")
    with pytest.raises(ValueError, match=r"drop the \.gz suffix"):
        idx.read_idx(tmp_path / "a.gz")


def test_missing_file_raises_file_not_found_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        idx.read_idx(tmp_path / "nothing-here")
