"""Reading and writing the IDX format, the file format of MNIST and Fashion-MNIST.

An IDX file is a 4-byte magic number (two zero bytes, a dtype code, the number of dimensions), one big-endian uint32 per
dimension, then the data in big-endian C order; MNIST's ``*-ubyte.gz`` files are gzipped IDX.
"""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np

__all__ = ["read_idx", "write_idx"]

# The dtype codes the IDX format defines, in the byte order the files use.
_DTYPE_BY_CODE: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODE_BY_DTYPE: dict[np.dtype, int] = {
    dtype.newbyteorder("="): code for code, dtype in _DTYPE_BY_CODE.items()
}
_GZIP_MAGIC = b"\x1f\x8b"
_MAX_NDIM = 255  # The ndim field is one byte.
_MAX_DIM = 2**32 - 1  # Each dimension is a uint32.


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Reads an IDX file into a numpy array.

    A ``.gz`` name is gunzipped on the fly. The array has the file's shape and dtype, in native byte order, writable.

    Args:
        path: The IDX file, for example ``train-images-idx3-ubyte.gz``.

    Returns:
        The array stored in the file.

    Raises:
        FileNotFoundError: If `path` does not exist.
        ValueError: If the file is not valid IDX: a bad magic number, an unknown dtype code, fewer data bytes than its
            dimensions say (truncated), or bytes after the data; or if a ``.gz`` file is not valid gzip.

    Example:
        >>> import tempfile, os, numpy as np
        >>> from stratagem.datasets import idx
        >>> path = os.path.join(tempfile.mkdtemp(), "labels-idx1-ubyte.gz")
        >>> idx.write_idx(path, np.array([3, 1, 4], dtype=np.uint8))
        >>> idx.read_idx(path)
        array([3, 1, 4], dtype=uint8)
    """
    content = _read_bytes(path)
    dtype, shape, data_offset = _parse_header(path, content)
    num_expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    num_found = len(content) - data_offset
    if num_found < num_expected:
        raise ValueError(
            f"IDX file {os.fspath(path)!r} is truncated: its header declares shape {shape} of "
            f"{dtype.newbyteorder('=').name}, which needs {num_expected} data bytes, but only {num_found} follow the "
            "header. The download or copy was probably cut short; fetch the file again. Received: "
            f"path={os.fspath(path)!r}, num_data_bytes={num_found}, num_expected_bytes={num_expected}")
    if num_found > num_expected:
        raise ValueError(
            f"IDX file {os.fspath(path)!r} has {num_found - num_expected} trailing bytes: its header declares shape "
            f"{shape} of {dtype.newbyteorder('=').name}, which needs exactly {num_expected} data bytes, but "
            f"{num_found} follow the header. The header or the data is corrupt. "
            f"Received: path={os.fspath(path)!r}, num_data_bytes={num_found}, num_expected_bytes={num_expected}")
    array = np.frombuffer(content, dtype=dtype, offset=data_offset).reshape(shape)
    # NOTE: astype copies, so the result is writable and in native byte order.
    return array.astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Writes a numpy array to an IDX file.

    The file is gzipped when its name ends in ``.gz``.

    Args:
        path: The file to write; an existing file is replaced.
        array: An array of dtype uint8, int8, int16, int32, float32 or float64, with at most 255 dimensions, each below
            2**32.

    Raises:
        ValueError: If the array's dtype has no IDX code, or its shape does not fit the IDX header.

    Example:
        >>> import tempfile, os, numpy as np
        >>> from stratagem.datasets import idx
        >>> path = os.path.join(tempfile.mkdtemp(), "images-idx3-ubyte")
        >>> idx.write_idx(path, np.zeros((2, 28, 28), dtype=np.uint8))
        >>> idx.read_idx(path).shape
        (2, 28, 28)
    """
    array = np.asarray(array)
    native_dtype = array.dtype.newbyteorder("=")
    if native_dtype not in _CODE_BY_DTYPE:
        supported = ", ".join(dtype.name for dtype in _CODE_BY_DTYPE)
        raise ValueError(f"The IDX format cannot store dtype {array.dtype.name}; it supports {supported}. Convert "
                         f"first, e.g. array.astype(np.int32). Received: array.dtype={array.dtype.name}")
    if array.ndim > _MAX_NDIM or any(dim > _MAX_DIM for dim in array.shape):
        raise ValueError(f"The IDX header stores at most 255 dimensions, each below 2**32. "
                         f"Received: array.shape={array.shape}")
    code = _CODE_BY_DTYPE[native_dtype]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = np.ascontiguousarray(array, dtype=_DTYPE_BY_CODE[code]).tobytes()
    # NOTE: mtime=0 so that the same array always gives the same bytes.
    gzipped = os.fspath(path).endswith(".gz")
    with gzip.GzipFile(path, "wb", mtime=0) if gzipped else open(path, "wb") as file:
        file.write(header + data)


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    """Returns the file's content, gunzipped when its name ends in ``.gz``."""
    if not os.fspath(path).endswith(".gz"):
        with open(path, "rb") as file:
            return file.read()
    try:
        with gzip.open(path, "rb") as file:
            return file.read()
    except (gzip.BadGzipFile, EOFError) as err:
        raise ValueError(f"{os.fspath(path)!r} ends in .gz but is not a complete gzip file ({err}). A cut-short "
                         "download gives this; fetch the file again, or drop the .gz suffix if the file was already "
                         f"unpacked. Received: path={os.fspath(path)!r}") from err


def _parse_header(path: str | os.PathLike[str], content: bytes) -> tuple[np.dtype, tuple[int, ...], int]:
    """Returns (big-endian dtype, shape, offset of the data) from an IDX header."""
    magic = content[:4]
    if len(magic) < 4 or magic[:2] != b"\x00\x00":
        hint = " The file looks gzipped; give it a .gz suffix." if magic[:2] == _GZIP_MAGIC else ""
        raise ValueError(f"{os.fspath(path)!r} is not an IDX file: the magic number must be 4 bytes starting with two "
                         f"zero bytes (00 00, dtype code, ndim).{hint} Received: path={os.fspath(path)!r}, "
                         f"magic={magic.hex(' ')!r}")
    code, ndim = magic[2], magic[3]
    if code not in _DTYPE_BY_CODE:
        known = ", ".join(f"0x{known_code:02X} ({dtype.newbyteorder('=').name})"
                          for known_code, dtype in _DTYPE_BY_CODE.items())
        raise ValueError(f"{os.fspath(path)!r} has an unknown IDX dtype code 0x{code:02X}; expected one of {known}. "
                         f"Received: path={os.fspath(path)!r}, dtype_code=0x{code:02X}")
    data_offset = 4 + 4 * ndim
    if len(content) < data_offset:
        raise ValueError(f"IDX file {os.fspath(path)!r} is truncated: its magic number declares {ndim} dimensions, "
                         f"which need a {data_offset}-byte header, but the file has only {len(content)} bytes. Fetch "
                         f"the file again. Received: path={os.fspath(path)!r}, num_bytes={len(content)}, ndim={ndim}")
    shape = struct.unpack(f">{ndim}I", content[4:data_offset])
    return _DTYPE_BY_CODE[code], shape, data_offset
