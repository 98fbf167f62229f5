"""Process helpers shared by the launcher and the data pipeline's worker processes."""

from __future__ import annotations

import ctypes
import signal
import sys


def die_with_parent() -> None:
    """Asks the kernel to SIGKILL this process when its parent dies (Linux; no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
