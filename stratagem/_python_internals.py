"""The one module that touches CPython's private names; written for CPython 3.11 to 3.13 (``WRITTEN_FOR``).

``tests/unit/package/test_python_internals.py`` checks the interpreter and each name; torch's are in
``_torch_internals.py``.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

WRITTEN_FOR = ((3, 11), (3, 12), (3, 13))  # the CPython releases (major, minor) this module was checked on


def run_before_thread_shutdown(fn: Callable[[], None]) -> None:
    """Runs ``fn`` when the main thread ends, before thread pools stop taking work.

    ``atexit`` handlers run only after Python has shut every ``concurrent.futures`` pool
    down; ``threading._register_atexit`` (what those pools use, CPython 3.9+) runs first.
    Where it is missing, ``atexit`` is the closest there is.
    """
    register = getattr(threading, "_register_atexit", None)
    (register or atexit.register)(fn)


def run_interpreter_exit() -> None:
    """Runs the end of a CPython interpreter, which a forked process ended by ``os._exit`` skips.

    Non-daemon threads are joined and ``threading``'s exit hooks run (``threading._shutdown``),
    then the ``atexit`` handlers (``atexit._run_exitfuncs``). multiprocessing calls
    ``threading._shutdown`` again afterwards: a no-op then.
    """
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
