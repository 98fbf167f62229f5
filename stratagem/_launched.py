"""What a process started by ``stratagem run`` reads from its launcher and leaves for it.

Below every other layer, so strategies and callbacks can use it without
importing the launcher:

- ``STRATAGEM_RESTART_COUNT``: how often the launcher restarted the job
  (``restart_count``; ``BackupAndRestore`` reads it).
- ``STRATAGEM_ERROR_FILE``: the worker's error file. When one worker crashes,
  its peers fail a moment later in their next collective, and their exits can
  reach the supervisor first. Each launched worker therefore records the wall
  time and summary of its own uncaught exception there (the hook is installed
  by ``import stratagem`` when the variable is set); the supervisor blames the
  worker whose exception came first. The files hold JSON only.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from types import TracebackType
from typing import Any

ERROR_FILE_ENV = "STRATAGEM_ERROR_FILE"
RESTART_COUNT_ENV = "STRATAGEM_RESTART_COUNT"
TORCH_ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # set by torch.distributed.elastic's agent (stratagem run --nnodes MIN:MAX)


def restart_count() -> int:
    """How often the launcher restarted this job before this start (0 if not launched)."""
    return int(os.environ.get(RESTART_COUNT_ENV, "0") or 0)


def crashed() -> bool:
    """True once an uncaught exception has ended the main script (read at exit time)."""
    # Python sets sys.last_value when it prints an uncaught exception, before atexit runs.
    return hasattr(sys, "last_value")


def install_excepthook() -> None:
    """Note the next uncaught exception (and, in a launched worker, record it to its error file)."""
    if getattr(sys.excepthook, "_stratagem", False):
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        torch_path = os.environ.get(TORCH_ERROR_FILE_ENV)
        if torch_path:
            # An elastic job's agent reads torch's error file for its root-cause report: the
            # layout torch's @record writes (message, py_callstack, timestamp).
            record = {"message": {"message": f"{kind.__name__}: {value}", "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(kind, value, tb)),
                "timestamp": str(int(time.time()))}}}
            with open(f"{torch_path}.tmp", "w", encoding="utf-8") as f:
                json.dump(record, f)
            os.replace(f"{torch_path}.tmp", torch_path)
        path = os.environ.get(ERROR_FILE_ENV)
        if not path:
            previous(kind, value, tb)
            return
        try:
            record = {"time": time.time(), "type": kind.__name__, "message": str(value),
                      "traceback": "".join(traceback.format_exception(kind, value, tb))[-4000:]}
            tmp = f"{path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(record, f)
            os.replace(tmp, path)
        finally:
            previous(kind, value, tb)

    hook._stratagem = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def read_error_file(path: str) -> dict[str, Any] | None:
    """The record a worker wrote, or None if it wrote none (or it is unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("time"), (int, float)) else None
