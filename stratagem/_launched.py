"""What a process started by ``stratagem run`` reads from its launcher and leaves for it (below every other layer).

``STRATAGEM_RESTART_COUNT``: how often the launcher restarted the job (``BackupAndRestore`` reads it).
``TORCHELASTIC_ERROR_FILE`` (torch's variable, set as torchrun sets it): when one worker crashes, its peers fail a
moment later in their next collective and may reach the launcher first, so each worker records its own uncaught
exception there in torch's ``@record`` JSON layout (torch's ``ErrorHandler``, installed by ``import stratagem`` when
the variable is set), and the launcher blames the worker whose record came first.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from types import TracebackType

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # torch's: torchrun and `stratagem run` both set it
RESTART_COUNT_ENV = "STRATAGEM_RESTART_COUNT"


@dataclass(frozen=True)
class ErrorRecord:
    """A worker's uncaught exception, as its error file holds it.

    Args:
        message: ``"Type: text"``, e.g. ``"ValueError: boom on rank 1"``.
        traceback: The formatted traceback (torch's ``py_callstack``).
        written_ns: When the file was written (its mtime). torch's own ``timestamp`` is whole seconds, too coarse to
            tell which of two peers failing within the same second failed first.
    """

    message: str
    traceback: str
    written_ns: int


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
        try:
            if os.environ.get(ERROR_FILE_ENV):
                _record(value, tb)
        finally:
            previous(kind, value, tb)

    hook._stratagem = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _record(value: BaseException, tb: TracebackType | None) -> None:
    """Writes ``value`` to the error file through torch's ``ErrorHandler`` (the layout ``@record`` writes)."""
    # Imported here: this module sits below torch's import in `import stratagem`, and only a crash needs it.
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    try:
        raise value
    except BaseException as err:
        # NOTE: record_exception formats sys.exc_info(), which (3.11+) takes the traceback from the exception: put
        # back the script's own, without this function's frame.
        err.__traceback__ = tb
        ErrorHandler().record_exception(err)


def read_error_file(path: str) -> ErrorRecord | None:
    """The record a worker wrote, or None if it wrote none (or it is unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
            written_ns = os.fstat(f.fileno()).st_mtime_ns
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("message"), str):
        return None
    extra = message.get("extraInfo")
    callstack = extra.get("py_callstack", "") if isinstance(extra, dict) else ""
    return ErrorRecord(message["message"], str(callstack), written_ns)
