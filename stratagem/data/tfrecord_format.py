"""The TFRecord file format: ``TFRecordOptions``, ``TFRecordWriter`` and ``RecordReader``.

A TFRecord file is a sequence of records, each framed as TensorFlow frames it::

    uint64 length           little-endian
    uint32 masked_crc32c(length's 8 bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

optionally compressed as one zlib or gzip stream; CRCs are masked CRC32C. The reader checks both of every record and
raises ``DataLossError`` naming the file and offset.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO

import crc32c as _crc32c
import numpy as np
from typing_extensions import override

from stratagem.errors import DataLossError

COMPRESSION_TYPES = ("", "ZLIB", "GZIP")
DEFAULT_BUFFER_SIZE = 256 * 1024  # TF's default read buffer for TFRecordDataset
_HEADER = struct.Struct("<QI")  # length, masked CRC of the length
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_UINT32 = 0xFFFFFFFF
_GZIP_WINDOW_BITS = 16  # added to zlib's window bits, it selects the gzip wrapper (as TF does)
_FLUSH_MODES = {"NO_FLUSH": zlib.Z_NO_FLUSH, "PARTIAL_FLUSH": getattr(zlib, "Z_PARTIAL_FLUSH", 1),
                "SYNC_FLUSH": zlib.Z_SYNC_FLUSH, "FULL_FLUSH": zlib.Z_FULL_FLUSH}


def masked_crc32c(data: Any) -> int:
    """TF's masked CRC32C: the CRC rotated right by 15 bits plus a constant (so CRCs of CRCs stay useful)."""
    crc = _crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _UINT32


def check_compression_type(compression_type: Any) -> str:
    """``""``, ``"ZLIB"`` or ``"GZIP"`` from None or one of those (any case); ValueError for anything else."""
    text = "" if compression_type is None else getattr(compression_type, "value", compression_type)
    if isinstance(text, bytes):
        text = text.decode()
    if not isinstance(text, str) or text.upper() not in COMPRESSION_TYPES:
        raise ValueError("compression_type must be None, '', 'ZLIB' or 'GZIP', as in TF. Received: "
                         f"compression_type={compression_type!r}")
    return text.upper()


@dataclass(frozen=True)
class TFRecordOptions:
    """How a ``TFRecordWriter`` compresses (``tf.io.TFRecordOptions``); None keeps TF's defaults.

    TF's zlib defaults (level 6, 15 window bits, memory level 9): the same options write TF's bytes.

    Args:
        compression_type: None or ``""``, ``"ZLIB"`` or ``"GZIP"``.
        flush_mode: What ``TFRecordWriter.flush`` asks of zlib: ``"NO_FLUSH"`` (default), ``"PARTIAL_FLUSH"``,
            ``"SYNC_FLUSH"`` or ``"FULL_FLUSH"`` (or zlib's integer constants).
        input_buffer_size: Accepted for TF's signature; Python's zlib buffers itself.
        output_buffer_size: Accepted for TF's signature.
        window_bits: zlib window bits, 8..15 (GZIP adds the gzip wrapper).
        compression_level: 0..9, or -1 for zlib's default (6).
        compression_method: Only ``zlib.DEFLATED`` (8) exists.
        mem_level: zlib memory level 1..9.
        compression_strategy: A zlib strategy constant (0 default).

    Example:
        >>> with TFRecordWriter("data.tfrecord.gz", TFRecordOptions(compression_type="GZIP")) as writer:
        ...     writer.write(b"record")
    """

    compression_type: str | None = None
    flush_mode: int | str | None = None
    input_buffer_size: int | None = None
    output_buffer_size: int | None = None
    window_bits: int | None = None
    compression_level: int | None = None
    compression_method: int | None = None
    mem_level: int | None = None
    compression_strategy: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression_type", check_compression_type(self.compression_type))
        if self.flush_mode is not None and self.flush_mode not in _FLUSH_MODES and \
                self.flush_mode not in _FLUSH_MODES.values():
            raise ValueError(f"flush_mode must be one of {sorted(_FLUSH_MODES)} or zlib's constant. "
                             f"Received: flush_mode={self.flush_mode!r}")

    @classmethod
    def get_compression_type_string(cls, options: TFRecordOptions | str | None) -> str:
        """The compression type of ``options`` (an options object, a type string or None) as a string."""
        return options.compression_type if isinstance(options, TFRecordOptions) else check_compression_type(options)  # type: ignore[return-value]

    def compressor(self) -> Any:
        """A zlib compressor with these settings, or None for plain files."""
        if not self.compression_type:
            return None
        window_bits = 15 if self.window_bits is None else int(self.window_bits)
        return zlib.compressobj(
            -1 if self.compression_level is None else int(self.compression_level),
            zlib.DEFLATED if self.compression_method is None else int(self.compression_method),
            window_bits + (_GZIP_WINDOW_BITS if self.compression_type == "GZIP" else 0),
            9 if self.mem_level is None else int(self.mem_level),  # TF's default, not zlib's 8
            zlib.Z_DEFAULT_STRATEGY if self.compression_strategy is None else int(self.compression_strategy),
        )

    def zlib_flush_mode(self) -> int:
        mode = self.flush_mode if self.flush_mode is not None else zlib.Z_NO_FLUSH
        return _FLUSH_MODES.get(mode, mode) if isinstance(mode, str) else int(mode)


class TFRecordWriter:
    """Writes records to a TFRecord file (``tf.io.TFRecordWriter``); a context manager.

    Args:
        path: The file to create (an existing file is replaced).
        options: A ``TFRecordOptions``, a compression type string, or None.

    Example:
        >>> with TFRecordWriter("train.tfrecord") as writer:
        ...     writer.write(example.SerializeToString())
    """

    def __init__(self, path: str | os.PathLike[str] | bytes, options: TFRecordOptions | str | None = None) -> None:
        self._options = options if isinstance(options, TFRecordOptions) else TFRecordOptions(compression_type=options)
        self.path = os.fsdecode(path)
        self._compressor = self._options.compressor()
        self._file: BinaryIO | None = open(self.path, "wb")  # noqa: SIM115 (closed by close())

    def write(self, record: bytes | str) -> None:
        """Appends one record (``bytes``; a ``str`` is written as UTF-8)."""
        data = record_bytes(record)
        length = struct.pack("<Q", len(data))
        frame = b"".join((length, _CRC.pack(masked_crc32c(length)), data, _CRC.pack(masked_crc32c(data))))
        self._output(frame if self._compressor is None else self._compressor.compress(frame))

    def flush(self) -> None:
        """Pushes what was written to the file (through zlib with the options' ``flush_mode``)."""
        if self._compressor is not None:
            mode = self._options.zlib_flush_mode()
            if mode != zlib.Z_NO_FLUSH:
                self._output(self._compressor.flush(mode))
        self._open_file().flush()

    def close(self) -> None:
        """Finishes the compressed stream and closes the file; idempotent."""
        if self._file is None:
            return
        if self._compressor is not None:
            self._output(self._compressor.flush(zlib.Z_FINISH))
        file, self._file = self._file, None
        file.close()

    def _output(self, data: bytes) -> None:
        if data:
            self._open_file().write(data)

    def _open_file(self) -> BinaryIO:
        if self._file is None:
            raise ValueError(f"TFRecordWriter for {self.path} is closed. Received: a write after close()")
        return self._file

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def record_bytes(record: Any) -> bytes:
    """A record (a serialized Example) as ``bytes``: from bytes-like, ``str`` (UTF-8) or a 0-d array of one."""
    if type(record) is bytes:  # the common case, first: parse_example calls this once per record
        return record
    if isinstance(record, np.ndarray) and record.ndim == 0:
        record = record.item()
    if isinstance(record, str):
        return record.encode()
    if isinstance(record, (bytes, bytearray, memoryview)):
        return bytes(record)
    raise TypeError(f"A TFRecord record or serialized Example must be bytes (e.g. example.SerializeToString()). "
                    f"Received: a record of type {type(record).__name__}")


class RecordReader:
    """Reads one TFRecord file's records in order, checking both CRCs of each.

    Opening at ``offset`` (in the uncompressed stream) seeks there, decompressing up to it: how an iterator resumes.

    Args:
        path: The file.
        compression_type: ``""``, ``"ZLIB"`` or ``"GZIP"``.
        buffer_size: Bytes read from the file at a time (0: only what each record needs).
        offset: Where to start, in bytes of the uncompressed stream.
    """

    def __init__(self, path: str, compression_type: str, *, buffer_size: int, offset: int = 0) -> None:
        self.path, self.offset = path, offset
        self._chunk = max(int(buffer_size), 1)
        self._file: BinaryIO | None = open_stream(path, compression_type, offset, chunk=self._chunk,
                                                  kind="TFRecord file")
        self._buffer, self._position = b"", 0  # unread bytes are _buffer[_position:]

    def read(self) -> bytes | None:
        """The next record, or None at the end; ``DataLossError`` if a CRC does not match or a record is cut."""
        if len(self._buffer) - self._position < _HEADER.size and not self._fill(_HEADER.size):
            return None
        buffer, start = self._buffer, self._position
        length, length_crc = _HEADER.unpack_from(buffer, start)
        if masked_crc32c(memoryview(buffer)[start:start + 8]) != length_crc:
            raise self._corrupt("the length's CRC32C does not match")
        end = start + _HEADER.size + length + _CRC.size
        if end > len(buffer):
            self._fill(end - start, inside_record=True)
            buffer, start = self._buffer, self._position
            end = start + _HEADER.size + length + _CRC.size
        data = buffer[start + _HEADER.size:end - _CRC.size]
        if masked_crc32c(data) != _CRC.unpack_from(buffer, end - _CRC.size)[0]:
            raise self._corrupt("the data's CRC32C does not match")
        self._position = end
        self.offset += end - start
        return data

    def _fill(self, needed: int, *, inside_record: bool = False) -> bool:
        """Makes ``needed`` unread bytes available; False at a clean end of file."""
        pieces = [self._buffer[self._position:]]
        available = len(pieces[0])
        while available < needed:
            more = self._read_some(max(self._chunk, needed - available))
            if not more:
                break
            pieces.append(more)
            available += len(more)
        self._buffer, self._position = b"".join(pieces), 0
        if available >= needed:
            return True
        if available == 0 and not inside_record:
            return False
        raise DataLossError(f"Truncated TFRecord record at offset {self.offset} of {self.path}: the file ends "
                            f"{available} bytes into a record of at least {needed} bytes (a writer stopped mid-record, "
                            f"or the file was cut). Received: path={self.path!r}, offset={self.offset}")

    def _read_some(self, size: int) -> bytes:
        assert self._file is not None, "read after close"
        return self._file.read(size)

    def _corrupt(self, what: str) -> DataLossError:
        return DataLossError(f"Corrupted TFRecord record at offset {self.offset} of {self.path}: {what}. The file is "
                             "damaged or is not a TFRecord file (is compression_type right?). Received: "
                             f"path={self.path!r}, offset={self.offset}")

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()


def open_stream(path: str, compression_type: str, offset: int = 0, *, chunk: int = DEFAULT_BUFFER_SIZE,
                kind: str = "file") -> BinaryIO:
    """``path``'s uncompressed bytes from ``offset`` on (``""``, ``"ZLIB"`` or ``"GZIP"``; decompressed up to it).

    Raises:
        DataLossError: If the file ends before ``offset``, or (while reading) its compressed stream is corrupt.
    """
    if not compression_type:
        file = open(path, "rb")  # noqa: SIM115 (the caller closes it)
        file.seek(offset)
        return file
    stream = io.BufferedReader(_Decompressed(path, compression_type, chunk, kind), max(chunk, io.DEFAULT_BUFFER_SIZE))
    skipped = 0
    while skipped < offset:
        step = len(stream.read(min(offset - skipped, chunk)))
        if not step:
            stream.close()
            raise DataLossError(f"Cannot resume {path} at offset {offset}: the file ends at {skipped}. "
                                f"Received: path={path!r}, offset={offset}")
        skipped += step
    return stream


class _Decompressed(io.RawIOBase):
    """The uncompressed bytes of a ZLIB or GZIP file; a gzip file's members, back to back, read as one stream."""

    def __init__(self, path: str, compression_type: str, chunk: int, kind: str) -> None:
        self._path, self._chunk, self._kind, self._position = path, chunk, kind, 0
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close())
        self._window_bits = 15 + (_GZIP_WINDOW_BITS if compression_type == "GZIP" else 0)
        self._decompressor = zlib.decompressobj(self._window_bits)

    @override
    def readable(self) -> bool:
        return True

    @override
    def readinto(self, buffer: Any) -> int:
        out = b""
        while not out:
            if self._decompressor.eof:  # a gzip file may hold several members back to back, each its own stream
                raw = self._decompressor.unused_data or self._file.read(self._chunk)
                self._decompressor = zlib.decompressobj(self._window_bits)
            else:
                raw = self._decompressor.unconsumed_tail or self._file.read(self._chunk)
            if not raw:  # the file's end; a stream cut short ends here too (its reader says where)
                return 0
            try:
                out = self._decompressor.decompress(raw, len(buffer))
            except zlib.error as err:
                raise DataLossError(
                    f"Corrupted compressed {self._kind} {self._path} near uncompressed offset {self._position}: "
                    f"{err}. Check compression_type matches how the file was written. Received: path={self._path!r}"
                ) from err
        buffer[:len(out)] = out
        self._position += len(out)
        return len(out)

    @override
    def close(self) -> None:
        self._file.close()
        super().close()
