"""Writing and reading checkpoint files, atomically and safely.

A write goes to a temporary file in the same folder, is fsynced and renamed over the target, and the folder is
fsynced: a crash leaves the old file or the new one, never half of one. A read runs no code from the file:
``.safetensors`` hold tensors only, anything else goes through ``unpickling.unpickle``. A damaged or unsafe file is
a ``CheckpointError`` that names it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from stratagem._disk_full import raise_if_disk_full
from stratagem.checkpoint.unpickling import refused, unpickle
from stratagem.errors import CheckpointError

MODEL_WEIGHTS_FILE = "weights.safetensors"  # the weights in a model.save folder (stratagem.models.saving)
_BEFORE_RENAME_HOOK: list[Callable[[str], None]] = []  # tests inject a crash between write and rename


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], object], suffix: str = "") -> None:
    """Calls ``write(tmp_path)``, then moves the result to ``path`` atomically (``suffix`` ends ``tmp_path``).

    Temporary files and folders that interrupted writes (a killed process) left in the same folder before this write
    began are deleted once it succeeds: one writer per folder (the chief), so none of them can still be in use.

    Raises:
        CheckpointError: If the disk (or quota) is full; the message names the path.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{suffix}", dir=target.parent)
    os.close(fd)
    started = os.stat(tmp).st_mtime_ns  # the file system's clock, as the leftovers' times are
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        for hook in _BEFORE_RENAME_HOOK:
            hook(tmp)
        os.replace(tmp, target)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise_if_disk_full(err, target)
        raise
    fsync_path(target.parent)
    remove_stale_temporaries(target.parent, before_ns=started)


# Names of temporaries: mkstemp's ``.<name>.<8 chars>.tmp`` above; safetensors' own ``.tmp<6 letters or digits>`` (it
# writes one and renames it over ours: a kill in between leaves it); save_model's ``<name>.tmp-<16 hex>`` folders; and
# (folders only) the sharded checkpoints' ``.<name>.partial`` and replace_folder's ``.<name>.old``.
_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$|^\.tmp[A-Za-z0-9]{6}$|^.+\.tmp-[0-9a-f]{16}$")
_TEMPORARY_FOLDER = re.compile(r"^\..+\.(partial|old)$")


def remove_stale_temporaries(folder: str | os.PathLike[str], *, before_ns: int) -> None:
    """Deletes checkpoint temporaries in ``folder`` last changed before ``before_ns`` (left by killed writes)."""
    for entry in Path(folder).iterdir():
        if not (_TEMPORARY.match(entry.name) or (_TEMPORARY_FOLDER.match(entry.name) and entry.is_dir())):
            continue
        try:
            if entry.lstat().st_mtime_ns >= before_ns:
                continue  # as new as the write that just finished: may be another write in progress
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()
        except OSError:  # gone meanwhile, or not ours to delete: it is only clean-up
            continue


def _torch_save(state: dict[str, Any], tmp: str) -> None:
    # Through a Python file, so that a failed write surfaces as its OSError (see _is_disk_full).
    with open(tmp, "wb") as f:
        torch.save(state, f)


def save_state(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Writes a nested dict of tensors, numbers, strings and lists atomically (``.safetensors``: flat tensors)."""
    if str(path).endswith(".safetensors"):
        from safetensors.torch import save_file

        tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
        atomic_write(path, lambda tmp: save_file(tensors, tmp))
    else:
        atomic_write(path, lambda tmp: _torch_save(state, tmp))


def load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a file written by ``save_state`` without running any code from it.

    Raises:
        CheckpointError: If the file is missing, truncated, corrupt, or holds objects other than tensors and plain
            containers.
    """
    path = str(path)
    if not os.path.exists(path):
        raise CheckpointError(f"Checkpoint file not found. Received: path={path!r}")
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, MODEL_WEIGHTS_FILE)):
            raise CheckpointError(
                f"Cannot load checkpoint {path!r}: it is a folder, not a checkpoint file, and not a model saved by "
                f"model.save (no {MODEL_WEIGHTS_FILE} in it). Pass the checkpoint file's path. Received: path={path!r}")
        path = os.path.join(path, MODEL_WEIGHTS_FILE)  # a model.save folder: its weights
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        try:
            return dict(load_file(path))
        except Exception as err:  # a damaged file; safetensors runs no code from it
            raise refused(path, err) from err
    with open(path, "rb") as file:
        state = unpickle(file, path=path)
    if not isinstance(state, dict):
        raise refused(path, TypeError(f"it holds a {type(state).__name__}, not a dict of state"))
    return state


_CKPT_NUMBER = re.compile(r"(\d+)")


def latest_checkpoint(checkpoint_dir: str | os.PathLike[str]) -> str | None:
    """The most recent checkpoint in ``checkpoint_dir`` (``tf.train.latest_checkpoint``).

    A checkpoint is a file, or a folder written by ``model.save`` (``ModelCheckpoint`` without
    ``save_weights_only``); ``load_weights`` and ``load_state`` read both.

    Only files in the formats stratagem's checkpointing writes count (``save_weights``, ``ModelCheckpoint``,
    ``save_state``: safetensors, or torch's zip format), so logs, event files and anything else kept beside them are
    passed over, as TF passes over files that are not checkpoints. The newest by modification time, ties broken by
    the largest number in the name; temporary files of interrupted writes are ignored. None if there is none.
    """
    folder = Path(checkpoint_dir)
    if not folder.is_dir():
        return None
    files = [p for p in folder.iterdir()
             if not p.name.startswith(".") and not p.name.endswith(".tmp") and not _TEMPORARY.match(p.name)
             and (_is_checkpoint(p) if p.is_file() else _is_checkpoint(p / MODEL_WEIGHTS_FILE))]
    if not files:
        return None

    def key(p: Path) -> tuple[float, int]:
        numbers = _CKPT_NUMBER.findall(p.name)
        return (p.stat().st_mtime, int(numbers[-1]) if numbers else -1)

    return str(max(files, key=key))


def _is_checkpoint(path: Path) -> bool:
    """Whether ``path`` is in a format ``save_state`` writes; reads only its header or zip directory."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if path.name.endswith(".safetensors"):
                # A safetensors file: an 8-byte little-endian header length, then that much JSON.
                size = int.from_bytes(head, "little")
                return len(head) == 8 and 0 < size < 100_000_000 and f.read(1) == b"{"
        if not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())  # torch.save's layout
    except (OSError, zipfile.BadZipFile):
        return False


def replace_folder(finished: Path, target: Path, *, started_ns: int) -> None:
    """Renames the finished folder ``finished`` to ``target``; what was at ``target`` is deleted.

    Then deletes the temporaries beside it that writes killed before ``started_ns`` left.

    Readers see the old folder or the new one, never neither (Linux ``renameat2``); elsewhere there is a moment with
    no folder at ``target``, and a crash then leaves the old one whole at ``.<name>.old`` (deleted by
    ``remove_stale_temporaries``).
    """
    if not os.path.lexists(target):
        os.replace(finished, target)
    elif _exchange(finished, target):
        shutil.rmtree(finished)  # now the old folder
    else:
        old = target.parent / f".{target.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(finished, target)
        shutil.rmtree(old)
    fsync_path(target.parent)
    remove_stale_temporaries(target.parent, before_ns=started_ns)


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a libc without it (glibc < 2.28, musl)
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):  # kernel or file system without it
        return False
    raise OSError(code, os.strerror(code), str(b))


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flushes a file or a folder (so a rename in it is durable) to disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
