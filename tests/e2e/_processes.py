"""Process checks shared by the launcher tests: is a pid alive, and are all of them gone."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie or a dead process counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def assert_all_gone(pids: list[int], within_s: float = 10) -> None:
    """Waits up to ``within_s`` for every process to end; fails naming the ones left behind."""
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    assert not left, f"processes were left behind: {left}"
