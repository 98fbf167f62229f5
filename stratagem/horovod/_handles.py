"""The integer handles of Horovod's ``_async`` operations: ``poll`` and ``synchronize``.

A handle holds the torch ``Work`` objects of its collectives and a ``finish`` that builds the result after them. A
named operation the other ranks have not issued yet is deferred (``_negotiation``): its handle starts empty, ``poll``
answers False, and ``synchronize`` asks the other ranks round by round until they issue it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch.distributed as dist

from stratagem.distribute import collectives as torch_collectives
from stratagem.horovod import _negotiation, basics
from stratagem.horovod.exceptions import HorovodInternalError

__all__ = ["poll", "synchronize"]


@dataclasses.dataclass
class _Pending:
    operation: str
    name: str | None
    works: Sequence[Any]  # torch Work objects of the collectives started; empty when nothing had to be sent
    finish: Callable[[], Any]  # turns the collective's buffers into the result, after the waits
    # A deferred operation: not started until every rank has issued it; (group, members) it waits on.
    deferred: tuple[dist.ProcessGroup | None, int] | None = None
    error: Exception | None = None  # refused when the other ranks issued it (raised by synchronize)
    begin: Callable[..., None] | None = None  # what the deferred call runs when they do


# NOTE: Horovod hands out integer handles; they index this per-process table until synchronize.
_pending: dict[int, _Pending] = {}
_handle_ids = itertools.count(1)


def check_name(operation: str, name: str | None) -> None:
    """Refuses the name of an operation still in flight (Horovod's error), before anything is sent: no peer waits."""
    if name is not None and any(p.name == name for p in _pending.values()):
        raise ValueError(
            f"{operation}: an operation named {name!r} is still in flight. Horovod requires the names of concurrent "
            f"operations to be unique: synchronize the first one, or pass another name. Received: name={name!r}")


def register(operation: str, works: Sequence[Any], finish: Callable[[], Any], name: str | None = None) -> int:
    handle = next(_handle_ids)
    _pending[handle] = _Pending(operation, name, [w for w in works if w is not None], finish)
    return handle


def start_named(operation: str, name: str | None, call: _negotiation.Call, process_set: basics.ProcessSet,
                start: Callable[[list[_negotiation.Call]], tuple[Sequence[Any], Callable[[], Any]]]) -> int:
    """Checks ``call`` with the other ranks and starts it with ``start(calls)`` (deferred while a name waits)."""
    check_name(operation, name)
    call = dataclasses.replace(call, name=_negotiation.name_code(name), deferrable=name is not None)
    group, members = basics.group_of(process_set), process_set.size()
    handle = register(operation, [], lambda: None, name)
    pending = _pending[handle]

    def begin(calls: list[_negotiation.Call] | HorovodInternalError) -> None:
        pending.deferred = None
        if isinstance(calls, HorovodInternalError):
            pending.error = calls
            return
        try:
            works, pending.finish = start(calls)
        except Exception as error:  # refused before any data moved, alike on every rank: raised by synchronize
            pending.error = error
            return
        pending.works = [w for w in works if w is not None]

    try:
        calls = _negotiation.negotiate(call, group, members, begin) if members > 1 else [call]
    except BaseException:
        del _pending[handle]
        raise
    if calls is None:
        pending.deferred, pending.begin = (group, members), begin
    else:
        begin(calls)
        if pending.error is not None:
            del _pending[handle]
            raise pending.error
    return handle


def poll(handle: int) -> bool:
    """Whether the operation behind ``handle`` has finished, so ``synchronize`` would not wait."""
    pending = _lookup(handle)
    return pending.deferred is None and all(work.is_completed() for work in pending.works)


def synchronize(handle: int) -> Any:
    """Waits for the operation behind ``handle`` (within the job's timeout) and returns its result.

    Raises:
        CollectiveTimeoutError: If a peer did not take part within the timeout.
        HorovodInternalError: If the collective failed (a peer closed its connection, say).
    """
    pending = _lookup(handle)
    while pending.deferred is not None:  # ask the other ranks until they issue it (or none can go on)
        try:
            _negotiation.wait_round(*pending.deferred)
        except BaseException:
            del _pending[handle]
            _negotiation.forget_deferred(pending.begin)
            raise
    del _pending[handle]
    if pending.error is not None:
        raise pending.error
    if pending.works:
        timeout_s = basics.timeout_s()
        with _internal_errors(), torch_collectives.collective_errors(pending.operation, timeout_s=timeout_s):
            for work in pending.works:
                work.wait(datetime.timedelta(seconds=timeout_s))
    return pending.finish()


@contextlib.contextmanager
def _internal_errors() -> Iterator[None]:
    """Re-raises a failed collective's ``RuntimeError`` as ``HorovodInternalError``, as Horovod's synchronize does."""
    try:
        yield
    except RuntimeError as error:
        if type(error) is RuntimeError:
            raise HorovodInternalError(str(error)) from error
        raise


def clear() -> None:
    """Forgets every pending handle (their group is being left)."""
    _pending.clear()
    _negotiation.forget_deferred()


def _lookup(handle: int) -> _Pending:
    if handle not in _pending:
        raise ValueError(f"Handle {handle!r} is unknown: it was synchronized already or never returned by an "
                         "_async operation. Keep each handle and synchronize it once.")
    return _pending[handle]
