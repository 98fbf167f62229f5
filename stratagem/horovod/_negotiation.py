"""Checks each collective against the other ranks before its data moves, and lets joined ranks stand in.

torch.distributed has no coordinator and gloo aborts the process on buffers of different sizes, so before each data
collective the ranks all-gather a fixed-size record of their call (125 int64: the call and up to 4 deferred calls) and
all raise ``HorovodInternalError`` if the records disagree, as Horovod's coordinator does. A rank inside ``hvd.join``
answers with JOIN and adds zeros to the others' all-reduces. A named ``_async`` call may wait in this rank's deferred
list while the program goes on (Horovod matches by name) and starts in the round where every rank has issued it;
unnamed and blocking calls match by call order, and ranks all waiting on calls nobody makes raise instead of hanging.
``SyncBatchNorm``'s per-layer collectives are not checked: a rank must not reach one while another waits at a
different call (Horovod stalls there too). gloo has no 16-bit integers: those travel widened (exact).
"""

from __future__ import annotations

import dataclasses
import enum
import weakref
import zlib
from collections.abc import Callable

import torch
import torch.distributed as dist

from stratagem.distribute import collectives as torch_collectives
from stratagem.horovod import basics
from stratagem.horovod.exceptions import HorovodInternalError

_RECORD_LENGTH = 25  # one call: kind, dtype, ndim, 16 dims, root, op, wire_op, first_join, name, deferrable
_MAX_NDIM = 16
_MAX_DEFERRED = 4  # deferred calls a record carries beside the current one


class Kind(enum.IntEnum):
    """The collective a record describes."""

    NONE = 0  # an empty deferred slot
    ALLREDUCE = 1
    ALLGATHER = 2
    BROADCAST = 3
    ALLTOALL = 4
    REDUCESCATTER = 5
    BARRIER = 6
    JOIN = 7
    GRADIENTS = 8  # a DistributedOptimizer's all-reduces of one step, checked once: shape = (count, checksum)
    WAIT = 9  # synchronize() of a deferred call: one round, in which other ranks may issue it


# Index in this list is a dtype's code in the record; append only.
_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
           torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.uint16,
           torch.uint32, torch.uint64]
# gloo lacks these; each travels as a wider type that holds every value exactly.
_WIDER = {torch.int16: torch.int32, torch.uint16: torch.int32, torch.uint32: torch.int64}
WIRE_OPS = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT]


# Checksum of a DistributedOptimizer's gradients -> its stand-in (zeros for each of its all-reduces),
# for a joined rank to take part in the steps of the ranks still training.
_gradient_stand_ins: dict[int, weakref.WeakMethod] = {}


def register_gradient_stand_in(checksum: int, stand_in: Callable[[], None]) -> None:
    """Lets ``join`` answer a GRADIENTS call of ``checksum`` with ``stand_in`` (a bound method, held weakly)."""
    _gradient_stand_ins[checksum] = weakref.WeakMethod(stand_in)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Call:
    """One rank's description of the collective it is about to run."""

    kind: Kind
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] = ()
    root: int = -1  # broadcast's root rank
    op: int = -1  # the Horovod reduction (index of ops.ReduceOp), compared across ranks
    wire_op: int = 0  # index in WIRE_OPS of the torch reduction that runs
    first_join: bool = False  # a JOIN record of a rank's first round inside join()
    name: int = -1  # crc32 of the operation's name (-1: none)
    deferrable: bool = False  # a named _async call: it may wait until the other ranks issue its name


def name_code(name: str | None) -> int:
    """A name as the record carries it."""
    return -1 if name is None else zlib.crc32(name.encode())


@dataclasses.dataclass
class _Deferred:
    call: Call
    group: dist.ProcessGroup | None
    # Starts the data collective with every member's record once all have issued the call, or takes the error.
    start: Callable[[list[Call] | HorovodInternalError], None]


# This rank's deferrable calls that the other ranks had not issued yet, oldest first.
_deferred: list[_Deferred] = []


def wire_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a tensor of ``dtype`` travels as (itself, unless gloo lacks it)."""
    if dtype is torch.uint64:
        raise TypeError("stratagem.horovod cannot send uint64 tensors: gloo has no 64-bit unsigned type and no "
                        "wider one holds every value. Cast to torch.int64 first. Received: dtype=torch.uint64")
    return _WIDER.get(dtype, dtype)


def negotiate(call: Call, group: dist.ProcessGroup | None, members: int,
              start: Callable[[list[Call] | HorovodInternalError], None] | None = None) -> list[Call] | None:
    """All-gathers every member's ``call`` and checks that they agree; returns the calls in member order.

    With ``start`` and a deferrable ``call``: if the other members are at other calls, ``call`` is deferred (``start``
    runs in a later round, when every member has issued it) and ``None`` is returned. Deferred calls of this rank that
    every member has issued start here, in the same round on every member. A ``WAIT`` call returns after one round.

    Raises:
        HorovodInternalError: On every member, if the calls disagree, or if a rank has joined and ``call`` is not an
            all-reduce (Horovod refuses those too).
    """
    assert start is not None or not call.deferrable, "a deferrable call needs the start it defers"
    while True:
        rounds = _exchange(call, group, members)
        calls = [current for current, _ in rounds]
        matched = _issued_everywhere(rounds)
        if matched is not None:
            records = [next(c for c in (current, *deferred) if (c.kind, c.name) == matched)
                       for current, deferred in rounds]
            problem = disagreement(list(enumerate(records)))
            error = None if problem is None else HorovodInternalError(f"[rank {basics.rank()}] {problem}")
            mine = next((d for d in _deferred if d.group is group and (d.call.kind, d.call.name) == matched), None)
            if mine is not None:  # this rank issued it earlier: start it now, as the others do
                _deferred.remove(mine)
                mine.start(records if error is None else error)
            elif error is not None:
                raise error
            else:  # it is this rank's current call
                return records
            if call.kind is Kind.WAIT:
                return None
            continue
        active = [(index, c) for index, c in enumerate(calls) if c.kind is not Kind.JOIN]
        crowded = [index for index, (c, deferred) in enumerate(rounds) if c.deferrable and len(deferred) == _MAX_DEFERRED]
        if _waits_for_names(active) and crowded:
            raise HorovodInternalError(f"[rank {basics.rank()}] Ranks {crowded} have {_MAX_DEFERRED} named _async "
                                       "operations waiting for other ranks to issue them already, the most a rank may "
                                       "have. Synchronize some first, or issue them in the same order on every rank.")
        if _waits_for_names(active):
            # Calls of different names: the deferrable ones wait for their names, the others ask again.
            if call.deferrable and start is not None:
                _deferred.append(_Deferred(call, group, start))
                return None
            continue
        problem = disagreement(active)
        if problem is None and len(active) < members and call.kind not in (Kind.ALLREDUCE, Kind.GRADIENTS):
            joined = [index for index, c in enumerate(calls) if c.kind is Kind.JOIN]
            problem = (f"{call.kind.name.lower()} is not supported while ranks have called hvd.join() (as in Horovod): "
                       f"only all-reduces continue with zeros from joined ranks. Received: joined ranks={joined}")
        if problem is None and call.kind is Kind.WAIT:
            pending = {index: [d.kind.name.lower() for d in deferred] for index, (_, deferred) in enumerate(rounds)}
            problem = ("Every rank is waiting for named operations that no other rank has issued, so none can "
                       f"complete. Issue the same names on every rank. Received: waiting operations by rank={pending}")
        if problem is not None:
            raise HorovodInternalError(f"[rank {basics.rank()}] {problem}")
        return calls


def _waits_for_names(active: list[tuple[int, Call]]) -> bool:
    """Whether the ranks are at different calls and some may wait for their names (so nothing runs this round)."""
    keys = {(c.kind, c.name if c.deferrable else -1) for _, c in active}
    return len(keys) > 1 and any(c.deferrable for _, c in active)


def _issued_everywhere(rounds: list[tuple[Call, list[Call]]]) -> tuple[Kind, int] | None:
    """A deferred call that every member has issued (deferred, or as its current call), in the same order everywhere."""
    for _, deferred in rounds:
        for candidate in deferred:
            key = (candidate.kind, candidate.name)
            if all(any(c.deferrable and (c.kind, c.name) == key for c in (current, *others))
                   for current, others in rounds):
                return key
    return None


def wait_round(group: dist.ProcessGroup | None, members: int) -> None:
    """One round of ``synchronize`` on a deferred call; ``HorovodInternalError`` on every member if none can go on."""
    negotiate(Call(Kind.WAIT), group, members)


def forget_deferred(start: Callable[..., None] | None = None) -> None:
    """Drops this rank's deferred calls (their group is being left), or the one that would run ``start``."""
    _deferred[:] = [d for d in _deferred if start is not None and d.start is not start]


def disagreement(calls: list[tuple[int, Call]]) -> str | None:
    """What differs between the ranks' calls (as ``(rank, call)``), or ``None`` if they may run together."""
    if not calls:
        return None
    kind = calls[0][1].kind

    def differs(field: str, values: dict[int, object]) -> str | None:
        if len(set(values.values())) <= 1:
            return None
        return (f"Mismatched {kind.name.lower()}: the ranks passed different {field}, so nothing was sent. "
                f"Every rank must call the same collective on tensors of the same dtype and shape. "
                f"Received: {field} by rank={values}")

    checks: list[tuple[str, dict[int, object]]] = [("operations", {r: c.kind.name.lower() for r, c in calls})]
    if len({c.kind for _, c in calls}) == 1:
        checks.append(("dtypes", {r: str(c.dtype) for r, c in calls}))
        if kind in (Kind.ALLGATHER, Kind.ALLTOALL):  # axis 0 may differ; the rest may not
            checks.append(("shapes beyond axis 0", {r: (len(c.shape), c.shape[1:]) for r, c in calls}))
        elif kind is Kind.GRADIENTS:
            checks.append(("gradients (count, checksum of shapes and dtypes)", {r: c.shape for r, c in calls}))
        else:
            checks.append(("shapes", {r: c.shape for r, c in calls}))
        checks += [("root ranks", {r: c.root for r, c in calls}), ("reductions", {r: c.op for r, c in calls})]
    return next((problem for field, values in checks if (problem := differs(field, values))), None)


def join() -> int:
    """Horovod's ``join``: stands in for the others' all-reduces until all have joined; returns the last to join."""
    size, first = basics.size(), True
    while True:
        calls = [current for current, _ in _exchange(Call(Kind.JOIN, first_join=first), None, size)]
        first = False
        active = [(rank, c) for rank, c in enumerate(calls) if c.kind is not Kind.JOIN]
        if not active:
            return max((rank for rank, c in enumerate(calls) if c.first_join), default=size - 1)
        # The running ranks check their calls themselves and raise on a mismatch or a refused kind, or
        # defer calls of different names: nothing moves.
        if _waits_for_names(active) or disagreement(active) is not None:
            continue
        if active[0][1].kind is Kind.ALLREDUCE:
            _stand_in_allreduce(active[0][1])
        elif active[0][1].kind is Kind.GRADIENTS:
            _stand_in_gradients(active[0][1])


def _stand_in_gradients(call: Call) -> None:
    method = _gradient_stand_ins.get(call.shape[1])
    stand_in = method() if method is not None else None
    if stand_in is None:
        raise HorovodInternalError(
            f"[rank {basics.rank()}] hvd.join(): the other ranks step a DistributedOptimizer that this rank does "
            "not have, so it cannot take part with zeros. Build the same model and DistributedOptimizer on every "
            f"rank. Received: gradients (count, checksum)={call.shape}")
    stand_in()


def _stand_in_allreduce(call: Call) -> None:
    # A joined rank adds zeros, so the others' sum is theirs alone; Average still divides by the full size.
    assert call.dtype is not None
    zeros = torch.zeros(call.shape, dtype=wire_dtype(call.dtype))
    with torch_collectives.collective_errors("join", timeout_s=basics.timeout_s()):
        dist.all_reduce(zeros, op=WIRE_OPS[call.wire_op])


def _exchange(call: Call, group: dist.ProcessGroup | None, members: int) -> list[tuple[Call, list[Call]]]:
    """Every member's current call and its deferred calls on ``group``, in member order."""
    values = [v for d in _deferred if d.group is group for v in _encode(d.call)]
    mine = torch.tensor(_encode(call) + values + [0] * (_MAX_DEFERRED * _RECORD_LENGTH - len(values)),
                        dtype=torch.int64)
    records = [torch.empty_like(mine) for _ in range(members)]
    with torch_collectives.collective_errors(call.kind.name.lower(), timeout_s=basics.timeout_s()):
        dist.all_gather(records, mine, group=group)
    rounds = []
    for record in records:
        values = record.tolist()
        current, *others = [values[i : i + _RECORD_LENGTH] for i in range(0, len(values), _RECORD_LENGTH)]
        rounds.append((_decode(current), [_decode(c) for c in others if c[0] != Kind.NONE]))
    return rounds


def _encode(call: Call) -> list[int]:
    if len(call.shape) > _MAX_NDIM:
        raise ValueError(f"At most {_MAX_NDIM} dimensions are supported. Received: ndim={len(call.shape)}")
    record = [int(call.kind), _DTYPES.index(call.dtype) if call.dtype is not None else -1, len(call.shape),
              *call.shape, *([0] * (_MAX_NDIM - len(call.shape))), call.root, call.op, call.wire_op,
              int(call.first_join), call.name, int(call.deferrable)]
    return record


def _decode(values: list[int]) -> Call:
    ndim = values[2]
    root, op, wire_op, first_join, name, deferrable = values[3 + _MAX_NDIM : 9 + _MAX_NDIM]
    return Call(Kind(values[0]), _DTYPES[values[1]] if values[1] >= 0 else None, tuple(values[3 : 3 + ndim]),
                root, op, wire_op, bool(first_join), name, bool(deferrable))
