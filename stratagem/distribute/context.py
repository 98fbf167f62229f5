"""What is in force now: the strategies entered with ``scope()`` and what the running code is part of.

The only mutable module state in stratagem. The bottom of the stack is the default strategy (a ``OneDeviceStrategy``
made on first use). One context variable (scoped to the call and the thread) holds what no public signature has room
for: ``replica_strategy``, set inside ``strategy.run`` (TF's replica context), read by ``get_strategy()``, Keras's
``apply_gradients`` (which then sums gradients across replicas) and ``metric.result()``; and ``scheduled_step``, the
id of the step a ``ClusterCoordinator`` runs on this worker, known where it calls the user's function and needed
where that function's ``optimizer.step()`` pushes gradients (servers apply each id once). A step's batch and global
batch size travel as arguments, not through here; Keras's device (``keras.device``) is Keras's own ambient value.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratagem.distribute.strategy import Strategy
    from stratagem.distribute.values import ReplicaContext



@dataclasses.dataclass(frozen=True)
class _Running:
    """What the running code is part of (the module docstring says why each field cannot be an argument)."""

    replica_strategy: Strategy | None = None  # whose run() is calling (TF's replica context); None: cross-replica
    scheduled_step: int | None = None  # the id of the coordinator's step this worker is running


_lock = threading.Lock()
_running: contextvars.ContextVar[_Running] = contextvars.ContextVar("running", default=_Running())
_stack: list[Strategy] = []
_default: Strategy | None = None
_distributed: weakref.ref[Strategy] | None = None  # the last strategy made with several replicas


def get_strategy() -> Strategy:
    """Returns the strategy whose ``run`` is calling, else that of the innermost ``scope()``, else the default."""
    replica = _running.get().replica_strategy
    if replica is not None:  # as in TF, code inside strategy.run sees that strategy
        return replica
    if _stack:
        return _stack[-1]
    return _default_strategy()


def has_strategy() -> bool:
    """True inside the ``scope()`` (or the ``run``) of a strategy other than the default one."""
    return bool(_stack) or _running.get().replica_strategy is not None


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
def _running_as(**fields: Any) -> Iterator[None]:
    token = _running.set(dataclasses.replace(_running.get(), **fields))
    try:
        yield
    finally:
        _running.reset(token)


def replica_context(strategy: Strategy) -> contextlib.AbstractContextManager[None]:
    """Within this block, code runs for one replica of ``strategy`` (inside ``strategy.run``)."""
    return _running_as(replica_strategy=strategy)


def scheduled_step(step_id: int) -> contextlib.AbstractContextManager[None]:
    """Within this block, this worker runs the coordinator's step ``step_id``."""
    return _running_as(scheduled_step=step_id)


def scheduled_step_id() -> int | None:
    """The id of the coordinator's step this worker is running, or None outside one."""
    return _running.get().scheduled_step


def replica_strategy() -> Strategy | None:
    """The strategy whose ``run`` is calling the current code, or None outside ``run`` (cross-replica context)."""
    return _running.get().replica_strategy


def get_replica_context() -> ReplicaContext | None:
    """This replica's ``ReplicaContext`` inside ``strategy.run`` (``tf.distribute.get_replica_context``).

    Outside ``run``: None inside a strategy's ``scope()`` (TF's cross-replica context), and the default strategy's
    context outside every scope, as in TF.
    """
    from stratagem.distribute.values import ReplicaContext

    replica = _running.get().replica_strategy
    if replica is not None:
        return ReplicaContext(replica)
    if _stack:
        return None
    return ReplicaContext(_default_strategy())


def in_cross_replica_context() -> bool:
    """True inside a strategy's ``scope()`` and outside its ``run`` (``tf.distribute.in_cross_replica_context``)."""
    return bool(_stack) and _running.get().replica_strategy is None
