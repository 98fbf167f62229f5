"""The one reader of pickled checkpoint bytes, and the exact list of what a checkpoint may name.

Every checkpoint path that meets a pickle comes here: ``load_state`` (weights, backups, Estimator checkpoints,
``hvd.elastic`` state) and ``checkpoint.sharded`` (DCP's ``.metadata`` and non-tensor items); other files are data
formats (safetensors, JSON, ``.npz`` without pickles). A pickle names what it calls, and a crafted one names
``os.system``. torch.save's zip files are read with ``torch.load(weights_only=True)`` (torch's own fixed list); bare
pickles (DCP's ``.metadata``, which torch's unpickler does not read) by ``_ExactUnpickler``, which admits exactly
the (module, name) pairs of ``ALLOWED_GLOBALS`` and resolves them itself, never by module: protocol 4 follows dotted
names, so an admitted module plus the name ``os.system`` would reach ``os.system``.
"""

from __future__ import annotations

import importlib
import io
import pickle
import zipfile
from typing import IO, Any

import torch
from typing_extensions import override

from stratagem._torch_internals import DCP_METADATA_GLOBALS
from stratagem.errors import CheckpointError

__all__ = ["ALLOWED_GLOBALS", "unpickle", "unpickle_exact"]

# What a bare checkpoint pickle (DCP's .metadata) may name, each by its exact module and name: DCP's metadata
# records, a path (the checkpoint id), shapes, and torch's dtypes and layouts (torch's names, in the torch adapter).
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = DCP_METADATA_GLOBALS


def unpickle(source: IO[bytes] | bytes, *, path: str) -> Any:
    """Reads one pickled checkpoint (torch.save's zip format, or a bare pickle) without running code from it.

    Args:
        source: The bytes, or a binary file open at their start.
        path: The file the bytes come from, for the error message.

    Raises:
        CheckpointError: If the bytes name anything not allowed (they could run
            code), or are truncated, corrupt, or not a pickle.
    """
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        if zipfile.is_zipfile(stream):
            stream.seek(0)
            return torch.load(stream, map_location="cpu", weights_only=True)
        stream.seek(0)
        return _ExactUnpickler(stream).load()
    except Exception as err:  # every failure to read is the same problem for the caller
        raise refused(path, err) from err


def unpickle_exact(data: bytes, *, allowed: frozenset[tuple[str, str]]) -> Any:
    """Reads a bare pickle that may name only the (module, name) pairs in ``allowed``; runs nothing else.

    For pickles that are not checkpoints (torch's elastic rendezvous state, ``launcher/_rendezvous_state``).

    Raises:
        pickle.UnpicklingError: If the bytes name anything else, or are not a pickle.
    """
    return _ExactUnpickler(io.BytesIO(data), allowed=allowed).load()


def refused(path: str, err: BaseException) -> CheckpointError:
    """The ``CheckpointError`` for a checkpoint file that could not be read (unsafe, or damaged)."""
    # torch names a refused class or function "global"; other unpickling errors are damage.
    text = str(err).lower()
    unsafe = isinstance(err, _RefusedGlobal) or any(
        words in text for words in ("unsupported global", "not an allowed global", "unsupported class",
                                    "unrecognized function", "can only build", "can only create new object"))
    reason = ("it holds objects that could run code when loaded, so it was not loaded (never load a checkpoint "
              "from someone you do not trust)" if unsafe
              else "it is not a checkpoint stratagem or torch wrote, or it is truncated or corrupt")
    return CheckpointError(f"Cannot load checkpoint {path!r}: {reason}. Use an older checkpoint, or re-create this "
                           f"one. Received: {type(err).__name__}: {str(err)[:200]}")


class _RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a class or function outside ``ALLOWED_GLOBALS``."""


class _ExactUnpickler(pickle.Unpickler):
    """Admits exactly the pairs of ``allowed``, looked up by this class, never by pickle's name lookup."""

    def __init__(self, file: IO[bytes], *, allowed: frozenset[tuple[str, str]] = ALLOWED_GLOBALS) -> None:
        super().__init__(file)
        self._allowed = allowed

    @override
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._allowed:
            raise _RefusedGlobal(f"the pickle names {module}.{name}, which is not among the names it may hold")
        return getattr(importlib.import_module(module), name)  # name has no dots: it is one of ours

    @override
    def persistent_load(self, pid: Any) -> Any:
        raise _RefusedGlobal("the file holds a persistent id, which a bare checkpoint pickle never holds")
