"""``TFRecordDataset``: the serialized records of TFRecord files (``tf.data.TFRecordDataset``).

The file format is ``stratagem.data.tfrecord_format``'s; ``num_parallel_reads`` interleaves files over the names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from typing_extensions import override

from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops.files import FileSourceDataset
from stratagem.data.ops.interleave import InterleaveDataset
from stratagem.data.ops.sources import TensorSliceDataset
from stratagem.data.options import AUTOTUNE
from stratagem.data.tfrecord_format import DEFAULT_BUFFER_SIZE, RecordReader, check_compression_type


class TFRecordDataset(FileSourceDataset):
    """The records of TFRecord files, each a ``bytes`` (``tf.data.TFRecordDataset``).

    Streaming. Each record's CRCs are checked as TF does: a damaged record raises ``DataLossError`` naming the file and
    offset. The state is the file and byte offset, so a resume seeks. A ``batch`` of records is a 1-D object array
    (numpy's fixed-width bytes would drop trailing zeros).

    Args:
        filenames: A file name, a list of them, or a ``Dataset`` of names (e.g. ``Dataset.list_files``), read in order.
        compression_type: None or ``""``, ``"ZLIB"`` or ``"GZIP"``.
        buffer_size: Bytes read from a file at a time (None: 256 KiB, TF's default; 0: no read-ahead).
        num_parallel_reads: None or 1 reads the files in turn; N (``AUTOTUNE``: the cores) interleaves N files' records
            in tf.data's order, the readers taking turns in the calling thread (a thread handoff per record would cost
            more than the record).
        name: Accepted for TF's signature.

    Raises:
        ValueError: For an unknown ``compression_type`` or a negative size.
        TypeError: If ``filenames`` is not a name, list or Dataset.

    Example:
        >>> files = Dataset.list_files("/data/train-*.tfrecord")
        >>> ds = TFRecordDataset(files).map(lambda record: parse_single_example(record, spec))
    """

    def __init__(self, filenames: str | os.PathLike[str] | Sequence[str] | Dataset, compression_type: str | None = None,
                 buffer_size: int | None = None, num_parallel_reads: int | None = None, name: str | None = None) -> None:
        super().__init__(filenames)
        self.compression_type = check_compression_type(compression_type)
        if buffer_size is not None and (not isinstance(buffer_size, int) or buffer_size < 0):
            raise ValueError(f"buffer_size must be None or a non-negative number of bytes. "
                             f"Received: buffer_size={buffer_size!r}")
        self.buffer_size = DEFAULT_BUFFER_SIZE if buffer_size is None else buffer_size
        if num_parallel_reads is not None:
            _check_positive("num_parallel_reads", num_parallel_reads, allow_autotune=True)
        self.num_parallel_reads = num_parallel_reads

    @override
    def _open_reader(self, path: str, offset: int) -> RecordReader:
        return RecordReader(path, self.compression_type, buffer_size=self.buffer_size, offset=offset)

    @override
    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self.num_parallel_reads in (None, 1):
            return super()._streaming_iterator(ctx)
        return self._interleaved()._make_iterator(ctx)

    def _interleaved(self) -> Dataset:
        """One single-file TFRecordDataset per name, interleaved as tf.data's parallel reads are."""
        names = self._parents[0] if self._files is None else TensorSliceDataset(list(self._files))
        cycle_length = (os.cpu_count() or 1) if self.num_parallel_reads == AUTOTUNE else self.num_parallel_reads
        return InterleaveDataset(names, self._one_file, cycle_length=cycle_length, block_length=1,
                                 num_parallel_calls=None, deterministic=True)

    def _one_file(self, name: Any) -> TFRecordDataset:
        return TFRecordDataset(name, self.compression_type, self.buffer_size)

    def __str__(self) -> str:
        return (f"TFRecordDataset({self._source_str()}, compression_type={self.compression_type!r}, "
                f"num_parallel_reads={self.num_parallel_reads})")
