"""One warning per TF call that has no meaning here (STYLE section 6: ignored configuration warns, never silently)."""

from __future__ import annotations

import warnings

# NOTE: a process-wide set, so a call repeated in a loop warns once; Python's own dedup is per code location
# and is turned off by test runners and `-W always`.
_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Warns ``message`` the first time ``key`` is seen in this process."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(message, UserWarning, stacklevel=3)
