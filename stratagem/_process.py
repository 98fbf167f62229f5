"""Process-wide settings: the launcher's worker processes, and the host allocator ``fit`` tunes."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import sys

# Set to 0 to leave glibc's malloc as it is (see keep_freed_memory).
KEEP_FREED_MEMORY_ENV = "STRATAGEM_KEEP_FREED_MEMORY"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, from glibc's malloc.h
_KEPT_BYTES = 1 << 30
_kept: bool | None = None  # decided on the first call


def die_with_parent() -> None:
    """Asks the kernel to SIGKILL this process when its parent dies (Linux; no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def keep_freed_memory() -> bool:
    """Lets glibc's malloc keep freed blocks of up to 1 GiB for reuse, once per process; returns whether it is in force.

    A training step frees and re-allocates the same large host tensors every step. By default glibc serves blocks
    over its mmap threshold (at most 32 MiB) with fresh ``mmap`` and returns freed memory at the heap's top to the
    kernel, so every step pays page faults and page zeroing again. With both thresholds raised the heap keeps the
    blocks, as torch's CUDA caching allocator does on a GPU, at the price of keeping the peak host memory (glibc
    only; ``STRATAGEM_KEEP_FREED_MEMORY=0`` opts out).
    """
    global _kept
    if _kept is None:
        _kept = False
        if os.environ.get(KEEP_FREED_MEMORY_ENV, "1") != "0" and platform.libc_ver()[0] == "glibc":
            mallopt = ctypes.CDLL(None).mallopt
            _kept = bool(mallopt(_M_MMAP_THRESHOLD, _KEPT_BYTES) and mallopt(_M_TRIM_THRESHOLD, _KEPT_BYTES))
    return _kept
