"""Horovod's exception types (``horovod.common.exceptions``), which Horovod scripts catch by name.

Both are ``RuntimeError`` subclasses, as in Horovod, so code that catches
``RuntimeError`` around a collective keeps working.
"""

from __future__ import annotations

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt"]


class HorovodInternalError(RuntimeError):
    """A collective failed on this rank: the ranks disagreed about it, or a peer failed.

    Raised on every rank that takes part when their calls do not match
    (operation, dtype, shape, root; see ``stratagem.horovod._negotiation``), so
    the program can catch it; nothing was sent. ``hvd.elastic.run`` restores
    the last commit when it sees one, as Horovod does.
    """


class HostsUpdatedInterrupt(RuntimeError):
    """The set of hosts changed; Horovod's elastic loop resets without restoring.

    Args:
        skip_sync: Whether the state may skip its sync after the reset (no host was lost).
    """

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the hosts of the elastic job changed")
        self.skip_sync = skip_sync
