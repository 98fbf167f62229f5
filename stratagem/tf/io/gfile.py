"""``tf.io.gfile``: TF's file API on the local file system (``os``, ``shutil``, ``glob``).

A URL scheme of TF's file-system plugins (``gs://``, ``s3://``, ``hdfs://``) is refused. A missing file raises
``tf.errors.NotFoundError`` (a ``FileNotFoundError``), as in TF.
"""

from __future__ import annotations

import glob as _glob
import os
import shutil
from collections.abc import Iterator
from typing import IO, Any

from stratagem.tf._refusal import module_getattr
from stratagem.tf.errors import AlreadyExistsError, NotFoundError


def _path(path: Any) -> str:
    text = os.fsdecode(path) if isinstance(path, bytes) else os.fspath(path)
    scheme = text.split("://", 1)[0] if "://" in text else None
    if scheme is not None and scheme != "file":
        raise ValueError(f"tf.io.gfile here reads the local file system only; {scheme}:// needs TF's file-system "
                         f"plugins. Mount the storage or copy the files to a local path. Received: path={text!r}")
    return text.removeprefix("file://")


def _must_exist(path: str) -> str:
    if not os.path.exists(path):
        raise NotFoundError(f"{path}: No such file or directory")
    return path


def exists(path: Any) -> bool:
    return os.path.exists(_path(path))


def isdir(path: Any) -> bool:
    return os.path.isdir(_path(path))


def makedirs(path: Any) -> None:
    """Creates ``path`` and its parents; an existing directory is fine."""
    os.makedirs(_path(path), exist_ok=True)


def mkdir(path: Any) -> None:
    os.mkdir(_path(path))


def listdir(path: Any) -> list[str]:
    """The entry names of a directory (not sorted, as in TF)."""
    return os.listdir(_must_exist(_path(path)))


def glob(pattern: Any) -> list[str]:
    """Paths matching ``pattern`` (``*``, ``?``, ``[...]``); a list of patterns gives the union."""
    patterns = [pattern] if isinstance(pattern, (str, bytes, os.PathLike)) else list(pattern)
    return [match for p in patterns for match in _glob.glob(_path(p))]


def remove(path: Any) -> None:
    os.remove(_must_exist(_path(path)))


def rmtree(path: Any) -> None:
    shutil.rmtree(_must_exist(_path(path)))


def copy(src: Any, dst: Any, overwrite: bool = False) -> None:
    shutil.copyfile(*_source_and_target(src, dst, overwrite))


def rename(src: Any, dst: Any, overwrite: bool = False) -> None:
    os.replace(*_source_and_target(src, dst, overwrite))


def _source_and_target(src: Any, dst: Any, overwrite: bool) -> tuple[str, str]:
    source, target = _must_exist(_path(src)), _path(dst)
    if os.path.exists(target) and not overwrite:
        raise AlreadyExistsError(f"{target} exists; pass overwrite=True to replace it")
    return source, target


def join(path: Any, *paths: Any) -> str:
    return os.path.join(_path(path), *(_path(p) for p in paths))


def walk(top: Any, topdown: bool = True, onerror: Any = None) -> Iterator[tuple[str, list[str], list[str]]]:
    return os.walk(_path(top), topdown=topdown, onerror=onerror)


class GFile:
    """``tf.io.gfile.GFile``: a file object (``open``); ``"r"`` reads text and ``"rb"`` bytes, as in Python.

    Example:
        >>> with GFile("/tmp/x.txt", "w") as f:  # doctest: +SKIP
        ...     f.write("hello")
    """

    def __init__(self, name: Any, mode: str = "r") -> None:
        path = _path(name)
        if "r" in mode and not os.path.exists(path):
            raise NotFoundError(f"{path}: No such file or directory")
        self.name = path
        self.mode = mode
        self._file: IO[Any] = open(path, mode)  # noqa: SIM115 (closed by close()/__exit__)

    def __enter__(self) -> GFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._file)

    def __getattr__(self, name: str) -> Any:  # read, readline, readlines, flush, tell, close: the file's own
        if name == "_file":
            raise AttributeError(name)
        return getattr(self._file, name)

    def write(self, file_content: Any) -> None:
        self._file.write(file_content)

    def seek(self, offset: int, whence: int = 0) -> None:
        self._file.seek(offset, whence)

    def size(self) -> int:
        return os.path.getsize(self.name)


Open = GFile


def stat(path: Any) -> Any:
    return os.stat(_must_exist(_path(path)))


__getattr__ = module_getattr("tf.io.gfile")
__all__ = ["GFile", "Open", "copy", "exists", "glob", "isdir", "join", "listdir", "makedirs", "mkdir", "remove",
           "rename", "rmtree", "stat", "walk"]
