"""``SnapshotDataset``: the first complete pass written under a directory, read back by later passes and runs.

Built on ``cache``'s file store, named by a fingerprint of the pipeline above: a changed pipeline writes a new one.
"""

from __future__ import annotations

import os
import warnings
import zlib
from collections.abc import Callable
from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.ops.cache import CacheDataset

_COMPRESSIONS = ("AUTO", "GZIP", "SNAPPY", None)


class SnapshotDataset(CacheDataset):
    """See ``Dataset.snapshot``.

    The fingerprint is the pipeline's description, not its functions' code: after changing a body, delete the directory.
    Elements are written uncompressed; a ``compression`` other than ``"AUTO"`` or None warns.

    Raises:
        ValueError: For an unknown ``compression``, or if ``reader_func`` or ``shard_func`` is given (stratagem writes
            and reads one file set).

    Example:
        >>> ds = Dataset.range(3).map(lambda x: x * 2).snapshot("/tmp/snap")  # doctest: +SKIP
    """

    def __init__(self, parent: Dataset, path: str | os.PathLike[str], compression: str | None = "AUTO",
                 reader_func: Callable[..., Any] | None = None, shard_func: Callable[..., Any] | None = None) -> None:
        if compression not in _COMPRESSIONS:
            raise ValueError(f"snapshot compression must be one of {list(_COMPRESSIONS)}. Received: compression={compression!r}")
        if reader_func is not None or shard_func is not None:
            raise ValueError("snapshot's reader_func and shard_func are not supported: stratagem writes one set of "
                             "files and reads them in order. Leave both out (shard with Dataset.shard if needed). "
                             f"Received: reader_func={reader_func!r}, shard_func={shard_func!r}")
        if compression in ("GZIP", "SNAPPY"):
            warnings.warn(f"snapshot compression={compression!r} is ignored: stratagem writes snapshots uncompressed.",
                          stacklevel=3)
        directory = os.fspath(path)
        os.makedirs(directory, exist_ok=True)
        fingerprint = zlib.crc32(str(parent).encode())
        super().__init__(parent, os.path.join(directory, f"snapshot-{fingerprint:08x}"))
        self.path = directory

    def __str__(self) -> str:
        return f"SnapshotDataset({self.path!r}) <- {self._parents[0]}"
