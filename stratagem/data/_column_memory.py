"""Large buffers for the in-memory cache's columns: a freed cache's memory is reused, fresh pages are populated ahead.

A fresh buffer's pages cost on first touch (the kernel zeroing them, on a virtual machine the host backing them):
for the seed chain's 376 MB cache 0.1-0.9 s in the writing thread. So a daemon thread populates a large fresh
column's pages (``MADV_POPULATE_WRITE``: contents unchanged, no race with the writes) on a core the fill does not
use; where they are resident already it is not started, as it would only slow torch's intra-op threads (0.015-0.02
s per epoch of that chain); after a fork, which write-protects them, the writing thread populates them itself
before it writes. A tensor column is numpy's ``malloc``, shared with torch: torch's 64-byte-aligned block
never fits the one a freed cache of the same size left, so every pipeline faulted in fresh pages. Without populating
(Linux before 5.14, other systems) the writes fault the pages in.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from typing import Any

import numpy as np
import torch

_MADV_POPULATE_WRITE = 23  # Linux 5.14+; Python 3.11's mmap module has no name for it
_POPULATE_STEP = 8 << 20  # bytes per madvise call, so the thread stays just ahead of the writer
_MIN_BYTES = 4 << 20  # smaller buffers are cheap to fault in the writing thread


def empty_rows(like: np.ndarray | torch.Tensor, num_rows: int) -> np.ndarray | torch.Tensor:
    """An uninitialised array (or tensor) of ``num_rows`` rows of ``like``'s row shape and dtype (module docstring)."""
    if isinstance(like, torch.Tensor):
        try:  # a dtype numpy has, on the CPU: numpy's malloc (module docstring)
            kind = torch.empty(0, dtype=like.dtype, device=like.device).numpy().dtype
        except (TypeError, RuntimeError):  # bfloat16, another device
            return torch.empty((num_rows, *like.shape[1:]), dtype=like.dtype, device=like.device)
        return torch.from_numpy(empty_rows(np.empty((0, *like.shape[1:]), dtype=kind), num_rows))
    array = np.empty((num_rows, *like.shape[1:]), dtype=like.dtype)
    if not array.dtype.hasobject:
        _populate_in_background(array, array.ctypes.data, array.nbytes)
    return array


def _populate_in_background(owner: Any, address: int, nbytes: int) -> None:
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE  # madvise takes whole pages inside the buffer
    stop = (address + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if _LIBC is None or stop - start < _MIN_BYTES:
        return
    resident = np.zeros((stop - start) // mmap.PAGESIZE, dtype=np.uint8)
    if _LIBC.mincore(start, stop - start, resident.ctypes.data) == 0 and (resident & 1).all():
        if _FORKED.is_set():
            # NOTE: a fork write-protects every page of this process, so resident pages fault once each on their
            # next write (mincore cannot tell). Populating them here, before the writes, costs less (seed chain
            # epoch 1 after a DataLoader started a worker, 6 rounds each: median 0.169 -> 0.148 s; in a background
            # thread it gained nothing, competing with torch's threads).
            _FORKED.clear()
            _populate(owner, start, stop)
        return  # else memory a freed buffer left: nothing to fault in
    _FORKED.clear()  # the thread populates every page, write-protected ones too
    threading.Thread(target=_populate, args=(owner, start, stop), name="stratagem-cache-pages", daemon=True).start()


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        return libc
    except (OSError, AttributeError):  # no C library with madvise (not Linux)
        return None


_LIBC = _load_libc()
_FORKED = threading.Event()  # set in the parent by a fork, until the next large column is populated
os.register_at_fork(after_in_parent=_FORKED.set)


def _populate(owner: Any, start: int, stop: int) -> None:
    # NOTE: a ctypes call releases the GIL, so this runs beside the fill on another core. ``owner`` (the array)
    # is held only to keep its memory allocated until the thread ends.
    assert _LIBC is not None
    for begin in range(start, stop, _POPULATE_STEP):
        if _LIBC.madvise(begin, min(_POPULATE_STEP, stop - begin), _MADV_POPULATE_WRITE) != 0:
            return  # not supported here (EINVAL before Linux 5.14): the writes fault the pages instead
