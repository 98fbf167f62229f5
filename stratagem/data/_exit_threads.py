"""Input pipelines' threads end before the interpreter does.

A daemon thread that is inside a torch op (C++, the GIL released) while the interpreter exits is ended by Python
3.11 with ``pthread_exit`` as it takes the GIL back, and the unwinding through torch's C++ frames aborts the process
("terminate called without an active exception", exit status 134) after the script's last line ran. An iterator
left open keeps such a thread working: ``next(iter(dataset))`` to look at one batch, a loop left early. So at exit
(``atexit``, which runs before daemon threads are cut off) every live pipeline thread is told to stop, then each gets
what is left of ``EXIT_WAIT_S`` to finish the element it is computing.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from typing import Protocol

EXIT_WAIT_S = 5.0  # in all, for the threads to finish their elements


class Stoppable(Protocol):
    """A pipeline thread's owner: ``stop`` asks it to end after its element, ``join`` waits for that."""

    def stop(self) -> None: ...

    def join(self, timeout: float) -> None: ...


class EventThread:
    """A thread that ends once ``event`` is set (checked between elements)."""

    def __init__(self, event: threading.Event, thread: threading.Thread) -> None:
        self._event, self._thread = event, thread

    def stop(self) -> None:
        self._event.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


# Held weakly: an owner that is gone took its thread's end with it (its close()), and none is kept alive by this.
_live: weakref.WeakSet[Stoppable] = weakref.WeakSet()
# A forked child has none of its parent's threads, and their owners' locks may have been held at the fork.
os.register_at_fork(after_in_child=_live.clear)


def stop_at_exit(owner: Stoppable) -> None:
    """Has ``owner``'s thread stopped and waited for at interpreter exit, while ``owner`` lives."""
    _live.add(owner)


def stop_all(wait_s: float = EXIT_WAIT_S) -> None:
    """Stops every registered thread, then waits for them, ``wait_s`` in all."""
    owners = list(_live)
    for owner in owners:
        owner.stop()
    deadline = time.monotonic() + wait_s
    for owner in owners:
        owner.join(max(0.0, deadline - time.monotonic()))


atexit.register(stop_all)
