"""Process checks shared by the launcher tests (a pid alive, all gone, its children) and a PS job's environment."""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


def children(pid: int) -> dict[int, str]:
    """The direct children of ``pid`` and their command lines (Linux /proc)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    return found


def ps_job_env() -> dict[str, str]:
    """Environment of a `stratagem run --ps` job: its scripts import tests.dist._models (servers need nothing)."""
    return dict(os.environ) | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                               "STRATAGEM_TIMEOUT_S": "60"}
