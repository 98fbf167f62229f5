"""File sources: ``ListFilesDataset`` (``Dataset.list_files``), ``TextLineDataset``, and their shared base.

They know their files, so the ``FILE`` auto-shard policy gives each worker every N-th (``with_files_shard``);
``FileSourceDataset`` reads from byte offsets, so a position restores with one seek.
"""

from __future__ import annotations

import abc
import copy
import glob
import os
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops.shuffle import mix_seed
from stratagem.data.tfrecord_format import check_compression_type, open_stream
from stratagem.errors import DataLossError


class ListFilesDataset(Dataset):
    """Sorted names of the files matching glob patterns; see ``Dataset.list_files``.

    Random-access; patterns are matched once, when built. ``shuffle=True`` permutes each epoch, as ``shuffle`` does.

    Args:
        file_pattern: A glob pattern or a list of them (their matches are merged, without duplicates).
        shuffle: Shuffle the names each epoch.
        seed: Seed of the shuffle; None uses the iterator's seed.

    Raises:
        FileNotFoundError: If no file matches (tf.data raises "No files matched pattern").

    Example:
        >>> names = Dataset.list_files("/data/train-*.txt", shuffle=False)
        >>> lines = TextLineDataset(names)
    """

    def __init__(self, file_pattern: str | os.PathLike[str] | Sequence[str], shuffle: bool = True,
                 seed: int | None = None) -> None:
        super().__init__()
        patterns = [os.fspath(file_pattern)] if isinstance(file_pattern, (str, os.PathLike)) else \
            [os.fspath(p) for p in file_pattern]
        self._files = sorted({path for pattern in patterns for path in glob.glob(pattern)})
        if not self._files:
            raise FileNotFoundError(f"No files matched pattern: {', '.join(patterns)}. Check the path and the glob "
                                    f"syntax. Received: file_pattern={file_pattern!r}")
        self._patterns, self._shuffle, self._seed = patterns, bool(shuffle), seed
        self._salt = zlib.crc32("\0".join(patterns).encode())
        self._permutation: tuple[int, np.ndarray] | None = None

    @property
    def files(self) -> list[str]:
        """The matched file names, sorted."""
        return list(self._files)

    def _length(self) -> int:
        return len(self._files)

    def _order(self, ctx: IterContext) -> np.ndarray:
        seed = mix_seed(self._seed if self._seed is not None else ctx.seed, self._salt, ctx.epoch)
        if self._permutation is None or self._permutation[0] != seed:
            self._permutation = (seed, np.random.default_rng(seed).permutation(len(self._files)))
        return self._permutation[1]

    def _get(self, index: int, ctx: IterContext) -> Any:
        position = int(self._order(ctx)[index]) if self._shuffle else index
        return np.bytes_(os.fsencode(self._files[position]))  # tf.string: bytes, as TF yields

    def _reads_files(self) -> bool:
        return True

    def with_files_shard(self, num_shards: int, index: int) -> ListFilesDataset:
        """Files ``index``, ``index + num_shards``, ... of the sorted list, before the shuffle: shards are disjoint."""
        clone = copy.copy(self)
        clone._files = shard_file_list(self._files, num_shards, index)
        clone._permutation = None
        return clone

    def __str__(self) -> str:
        return f"ListFilesDataset({self._patterns}, shuffle={self._shuffle}, {len(self._files)} files)"


def shard_file_list(files: Sequence[str], num_shards: int, index: int) -> list[str]:
    """Every ``num_shards``-th file from ``index``; ValueError out of range or for fewer files than shards."""
    _check_positive("num_shards", num_shards)
    if not 0 <= index < num_shards:
        raise ValueError(f"index must be in [0, num_shards={num_shards}). Received: index={index}")
    if len(files) < num_shards:
        raise ValueError(f"Cannot shard {len(files)} files into {num_shards} shards: some workers would get no file. "
                         f"Use fewer workers or more files, or AutoShardPolicy.DATA. Received: num_files={len(files)}, "
                         f"num_shards={num_shards}")
    return list(files[index::num_shards])


class FileSourceDataset(Dataset):
    """Base of the sources that read records from a list of files in order (text lines, TFRecords).

    A subclass opens one file as a reader with ``read()`` (the next element, or None), ``offset`` (bytes consumed, where
    a reader opened there resumes) and ``close()``. The state is the file's position in the list and that offset.
    """

    def __init__(self, filenames: str | os.PathLike[str] | Sequence[str] | Dataset) -> None:
        if isinstance(filenames, Dataset):
            super().__init__(filenames)
            self._files: list[str] | None = None
        else:
            super().__init__()
            self._files = _file_list(filenames)

    @abc.abstractmethod
    def _open_reader(self, path: str, offset: int) -> Any:
        """A reader of ``path`` positioned at ``offset``."""

    @property
    def files(self) -> list[str] | None:
        """The file names, or None when they come from a ``Dataset``."""
        return None if self._files is None else list(self._files)

    def _reads_files(self) -> bool:
        return True

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        names = None if self._files is not None else self._parents[0]._make_iterator(ctx)
        return FileRecordIterator(self._files, names, self._open_reader)

    def with_files_shard(self, num_shards: int, index: int) -> FileSourceDataset:
        """Every ``num_shards``-th file from ``index``; a ``list_files`` source shards before its shuffle."""
        clone = copy.copy(self)
        if self._files is not None:
            clone._files = shard_file_list(self._files, num_shards, index)
            return clone
        names = self._parents[0]
        if hasattr(names, "with_files_shard"):
            clone._parents = (names.with_files_shard(num_shards, index),)
            return clone
        count = names._length()
        if count is not None and count >= 0:
            shard_file_list(range(count), num_shards, index)  # type: ignore[arg-type]  # validates the counts
        clone._parents = (names.shard(num_shards, index),)
        return clone

    def _source_str(self) -> str:
        return f"{len(self._files)} files" if self._files is not None else str(self._parents[0])


class TextLineDataset(FileSourceDataset):
    """Lines of text files as bytes scalars, without the line ending (``tf.data.TextLineDataset``).

    Streaming. A line ends at ``\\n`` (a ``\\r`` before it is dropped too); a last line without one is still produced.

    Args:
        filenames: A file name, a list of them, or a ``Dataset`` of names (e.g. ``Dataset.list_files``), read in order.
        compression_type: None or ``""`` for plain files, ``"ZLIB"`` or ``"GZIP"``, as in TF.

    Raises:
        ValueError: If ``compression_type`` is not supported.
        TypeError: If ``filenames`` is not a name, list or Dataset.

    Example:
        >>> lines = [line.decode() for line in TextLineDataset(["a.txt", "b.txt"])]
    """

    def __init__(self, filenames: str | os.PathLike[str] | Sequence[str] | Dataset,
                 compression_type: str | None = None) -> None:
        super().__init__(filenames)
        self.compression_type = check_compression_type(compression_type)

    def _open_reader(self, path: str, offset: int) -> _LineReader:
        return _LineReader(path, self.compression_type, offset)

    def __str__(self) -> str:
        return f"TextLineDataset({self._source_str()}, compression_type={self.compression_type!r})"


class _LineReader:
    """One text file's lines; in a compressed file the seek decompresses up to the offset."""

    def __init__(self, path: str, compression: str, offset: int) -> None:
        self._handle, self.offset = open_stream(path, compression, offset, kind="text file"), offset

    def read(self) -> Any:
        line = self._handle.readline()
        if not line:
            return None
        self.offset += len(line)
        return np.bytes_(_strip_line_ending(line))

    def close(self) -> None:
        self._handle.close()


class FileRecordIterator(DatasetIterator):
    """Reads the files of a ``FileSourceDataset`` one after another, through its readers."""

    _FILE_INDEX = "file_index"
    _OFFSET = "offset"
    _FILE = "file"

    def __init__(self, files: list[str] | None, names: DatasetIterator | None,
                 open_reader: Callable[[str, int], Any]) -> None:
        self._files, self._names, self._open_reader = files, names, open_reader
        self._file_index = 0  # position in the file list of the file being read (or next to open)
        self._offset = 0  # bytes of that file already returned, while no reader is open
        self._current: str | None = None  # its name, once known (names from a Dataset)
        self._reader: Any = None

    def __next__(self) -> Any:
        while True:
            if self._reader is None and not self._open_next():
                raise StopIteration
            try:
                element = self._reader.read()
            except DataLossError:
                # The framing after a damaged record cannot be trusted: the file ends here, so
                # ignore_errors() goes on with the next file instead of failing on this one forever.
                self._next_file()
                raise
            if element is not None:
                return element
            self._next_file()

    def _next_file(self) -> None:
        self._close_reader()
        self._current, self._file_index, self._offset = None, self._file_index + 1, 0

    def _open_next(self) -> bool:
        if self._files is not None:
            if self._file_index >= len(self._files):
                return False
            self._current = self._files[self._file_index]
        elif self._current is None:
            assert self._names is not None
            try:
                self._current = _name_of(next(self._names))
            except StopIteration:
                return False
        self._reader = self._open_reader(self._current, self._offset)
        return True

    def get_state(self) -> dict[str, Any]:
        offset = self._reader.offset if self._reader is not None else self._offset
        state: dict[str, Any] = {self._FILE_INDEX: self._file_index, self._OFFSET: offset}
        if self._names is not None:
            # The names iterator has produced exactly the names up to the current file.
            state[self._PARENT], state[self._FILE] = self._names.get_state(), self._current or ""
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        self._close_reader()
        self._file_index, self._offset = int(state[self._FILE_INDEX]), int(state[self._OFFSET])
        self._current = None
        if self._names is not None:
            self._names.set_state(state[self._PARENT])
            self._current = str(state[self._FILE]) or None

    def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            self._offset = reader.offset
            reader.close()

    def close(self) -> None:
        self._close_reader()
        if self._names is not None:
            self._names.close()


def _strip_line_ending(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def _file_list(filenames: Any) -> list[str]:
    if isinstance(filenames, (str, bytes, os.PathLike)):
        return [os.fsdecode(filenames)]
    if isinstance(filenames, np.ndarray):
        filenames = filenames.reshape(-1).tolist()
    if isinstance(filenames, (list, tuple)):
        return [_name_of(name) for name in filenames]
    raise TypeError("filenames must be a file name, a list of names or a Dataset of names. Received: filenames of type "
                    f"{type(filenames).__name__}")


def _name_of(value: Any) -> str:
    """A file name from a str, bytes, path, or numpy / 0-d array element."""
    if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) == 0:
        value = value.item()
    if isinstance(value, (str, bytes, os.PathLike)):
        return os.fsdecode(value)
    raise TypeError(f"A file name must be a string. Received: {value!r} of type {type(value).__name__}")
