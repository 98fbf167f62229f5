"""Horovod's exception types (``horovod.common.exceptions``): ``RuntimeError`` subclasses, as in Horovod."""

from __future__ import annotations

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt"]


class HorovodInternalError(RuntimeError):
    """A collective failed on this rank: the ranks disagreed about it, or a peer failed.

    Raised on every rank when their calls do not match (``_negotiation``); nothing was sent. ``hvd.elastic.run``
    restores the last commit on it, as Horovod does.
    """


class HostsUpdatedInterrupt(RuntimeError):
    """The set of hosts changed; Horovod's elastic loop resets without restoring (``skip_sync``: no host was lost)."""

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the hosts of the elastic job changed")
        self.skip_sync = skip_sync
