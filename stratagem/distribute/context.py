"""What is in force now: the strategies entered with ``scope()`` and the replica context.

Nothing else in stratagem keeps mutable module state. The bottom of the stack
is the default strategy (a ``OneDeviceStrategy`` made on first use). What a
step needs (its global batch size) travels as arguments, not through here. Inside
``strategy.run`` the code is in that strategy's replica context (TF's words):
Keras optimizers then sum gradients across replicas, and Keras metrics read there
give this replica's value (``stratagem.models.keras_internals``).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stratagem.distribute.strategy import Strategy
    from stratagem.distribute.values import ReplicaContext

_lock = threading.Lock()
# The strategy whose run() is calling the code now (TF's replica context), else None (cross-replica context).
_replica_strategy: contextvars.ContextVar[Strategy | None] = contextvars.ContextVar("replica_strategy", default=None)
_stack: list[Strategy] = []
_default: Strategy | None = None
_distributed: weakref.ref[Strategy] | None = None  # the last strategy made with several replicas


def get_strategy() -> Strategy:
    """Returns the strategy whose ``run`` is calling, else that of the innermost ``scope()``, else the default."""
    replica = _replica_strategy.get()
    if replica is not None:  # as in TF, code inside strategy.run sees that strategy
        return replica
    if _stack:
        return _stack[-1]
    return _default_strategy()


def has_strategy() -> bool:
    """True inside the ``scope()`` (or the ``run``) of a strategy other than the default one."""
    return bool(_stack) or _replica_strategy.get() is not None


def push(strategy: Strategy) -> None:
    with _lock:
        _stack.append(strategy)


def pop(strategy: Strategy) -> None:
    with _lock:
        if not _stack or _stack[-1] is not strategy:
            raise RuntimeError("strategy scopes must be exited in the reverse order they were entered")
        _stack.pop()


def reset() -> None:
    """Empties the stack and forgets the default and distributed strategies (tests use this)."""
    global _default, _distributed
    with _lock:
        _stack.clear()
        _default = _distributed = None


def note_distributed(strategy: Strategy) -> None:
    """Records a strategy made with several replicas: a model outside its scope is then a mistake."""
    global _distributed
    with _lock:
        _distributed = weakref.ref(strategy)


def distributed_strategy() -> Strategy | None:
    """The last strategy made in this process with several replicas, if it is still alive."""
    return _distributed() if _distributed is not None else None


def is_default(strategy: Strategy) -> bool:
    """True for the default strategy, the one in force outside every ``scope()``."""
    return strategy is _default


def _default_strategy() -> Strategy:
    global _default
    with _lock:
        if _default is None:
            from stratagem.distribute.one_device import OneDeviceStrategy

            _default = OneDeviceStrategy()
        return _default


@contextlib.contextmanager
def replica_context(strategy: Strategy) -> Iterator[None]:
    """Within this block, code runs for one replica of ``strategy`` (inside ``strategy.run``)."""
    token = _replica_strategy.set(strategy)
    try:
        yield
    finally:
        _replica_strategy.reset(token)


def replica_strategy() -> Strategy | None:
    """The strategy whose ``run`` is calling the current code, or None outside ``run`` (cross-replica context)."""
    return _replica_strategy.get()


def get_replica_context() -> ReplicaContext | None:
    """This replica's ``ReplicaContext`` inside ``strategy.run`` (``tf.distribute.get_replica_context``).

    Outside ``run``: None inside a strategy's ``scope()`` (TF's cross-replica context), and the
    default strategy's context outside every scope, as in TF.
    """
    from stratagem.distribute.values import ReplicaContext

    replica = _replica_strategy.get()
    if replica is not None:
        return ReplicaContext(replica)
    if _stack:
        return None
    return ReplicaContext(_default_strategy())


def in_cross_replica_context() -> bool:
    """True inside a strategy's ``scope()`` and outside its ``run`` (``tf.distribute.in_cross_replica_context``)."""
    return bool(_stack) and _replica_strategy.get() is None
