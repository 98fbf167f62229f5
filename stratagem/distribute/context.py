"""The one module-level global: the stack of strategies entered with ``scope()``.

Nothing else in stratagem keeps mutable module state. The bottom of the stack
is the default strategy (a ``OneDeviceStrategy`` made on first use).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stratagem.distribute.strategy import Strategy

_lock = threading.Lock()
_stack: list[Strategy] = []
_default: Strategy | None = None


def get_strategy() -> Strategy:
    """Returns the strategy of the innermost ``scope()``, or the default strategy."""
    if _stack:
        return _stack[-1]
    return _default_strategy()


def has_strategy() -> bool:
    """True inside the ``scope()`` of a strategy other than the default one."""
    return bool(_stack)


def push(strategy: Strategy) -> None:
    with _lock:
        _stack.append(strategy)


def pop(strategy: Strategy) -> None:
    with _lock:
        if not _stack or _stack[-1] is not strategy:
            raise RuntimeError("strategy scopes must be exited in the reverse order they were entered")
        _stack.pop()


def reset() -> None:
    """Empties the stack and forgets the default strategy (tests use this)."""
    global _default
    with _lock:
        _stack.clear()
        _default = None


def _default_strategy() -> Strategy:
    global _default
    with _lock:
        if _default is None:
            from stratagem.distribute.one_device import OneDeviceStrategy

            _default = OneDeviceStrategy()
        return _default
