"""Thin wrappers over torch.distributed: rendezvous, all-reduce, DDP wrapping.

Every wait here has a timeout, and every failure names the rank and the operation. The store's listening socket is
bound by us to the chief's address (loopback unless the user names another), because torch's own TCPStore server
would listen on every interface.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch import nn

from stratagem.distribute.compression import Compression, register_compression
from stratagem.distribute import _rendezvous, job_secret
from stratagem.distribute._interfaces import choose_gloo_interface
from stratagem import _launched
from stratagem.errors import CollectiveError, CollectiveTimeoutError

def init_process_group(
    *, rank: int, world_size: int, master_addr: str, master_port: int, backend: str, timeout_s: float,
    peers: Sequence[str] | None = None,
) -> None:
    """Joins the job's process group, failing within about ``timeout_s`` if a peer is missing.

    ``peers`` optionally describes each rank ("worker 1 at h2:2222") for the error messages.

    Raises:
        CollectiveTimeoutError: If the chief is unreachable, or a rank did not join in time (named, with ``peers``).
        ConfigurationError: If a rank of a multi-host job would listen on loopback only.
        RuntimeError: If the backend could not connect the ranks; names the peer.
    """
    # NOTE: a loopback job stays on loopback; a multi-host one listens on the interface that reaches the chief,
    # whatever this host's name resolves to (see _interfaces). Also for a mixed backend ("cpu:gloo,cuda:nccl",
    # stratagem.horovod on CUDA hosts), whose CPU tensors go through gloo.
    _, address = choose_gloo_interface(master_addr) if "gloo" in backend else (None, None)
    store: dist.Store = _chief_store(rank=rank, master_addr=master_addr, master_port=master_port, timeout_s=timeout_s)
    # NOTE: a process may leave and join again (Horovod's shutdown then init). The chief keeps serving its store
    # across that, so a rank that left first cannot reach a store about to close; and each join's keys live under its
    # own generation, so nobody reads the last join's marks and addresses. Every rank of a job joins its chief the
    # same number of times, so the generations agree.
    generation = _joins[(master_addr, master_port)] = _joins.get((master_addr, master_port), 0) + 1
    # The job's keys live under a prefix derived from the job's secret (job_secret), and with a secret every value is
    # signed and checked on read: anyone reaching the port can list the keys and write.
    prefix = job_secret.store_prefix(master_addr)
    store = dist.PrefixStore(prefix if generation == 1 else f"{prefix}/join{generation}", store)
    signing_key = job_secret.store_signing_key()
    if signing_key is not None:
        store = _rendezvous.SignedStore(store, key=signing_key,
                                        where=f"rank {rank}/{world_size}, store at {master_addr}:{master_port}")
    _rendezvous.wait_for_ranks(store, rank=rank, world_size=world_size, timeout_s=timeout_s, peers=peers)
    addresses = _rendezvous.exchange_addresses(store, rank=rank, world_size=world_size, address=address,
                                               master_addr=master_addr, peers=peers)
    device_id = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None

    def setup() -> None:
        dist.init_process_group(
            backend, store=dist.PrefixStore("stratagem/pg", store), rank=rank, world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s), device_id=device_id,
        )

    _rendezvous.run_bounded_setup(setup, store, rank=rank, world_size=world_size, timeout_s=timeout_s,
                                  addresses=addresses, peers=peers)
    # Keep the store alive as long as the group: rank 0 serves it.
    global _store, _rank_places
    _store = store
    # Each rank as messages name it: its task in the cluster, else the address gloo reaches it at.
    _rank_places = [f" ({peers[r]})" if peers and r < len(peers) else f" at {a}" if a else ""
                    for r, a in enumerate(addresses)]


_store: dist.Store | None = None
_joins: dict[tuple[str, int], int] = {}  # how often this process joined each chief (address, port)
_served: tuple[tuple[str, int], dist.TCPStore] | None = None  # the store this process serves as chief


def _chief_store(*, rank: int, master_addr: str, master_port: int, timeout_s: float) -> dist.TCPStore:
    """The chief's store: served once per address by rank 0 and kept for later joins; a client elsewhere."""
    global _served
    if rank != 0:
        return _rendezvous.connect_store(rank=rank, master_addr=master_addr, master_port=master_port,
                                         timeout_s=timeout_s)
    if _served is None or _served[0] != (master_addr, master_port):
        _served = None  # a store for another address closes before this one binds
        _served = ((master_addr, master_port), _rendezvous.connect_store(
            rank=0, master_addr=master_addr, master_port=master_port, timeout_s=timeout_s))
    return _served[1]


def destroy_process_group(*, graceful: bool = False, timeout_s: float = 10.0) -> None:
    """Leaves the process group if one is active; safe to call twice.

    With ``graceful`` (a clean exit), every other rank signs off through the store after leaving, and rank 0, which
    serves the store, keeps it up until they all have (at most ``timeout_s``): a store vanishing under a peer that
    is still leaving can abort that peer's process.
    """
    global _store
    rank: int | None = None
    world_size = 0
    if dist.is_available() and dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
        dist.destroy_process_group()
    store, _store = _store, None
    if not graceful or store is None or rank is None:
        return
    try:
        if rank != 0:
            store.set(f"stratagem/left/{rank}", "1")
            return
        keys = [f"stratagem/left/{r}" for r in range(1, world_size)]
        deadline = time.monotonic() + timeout_s
        while not store.check(keys) and time.monotonic() < deadline:
            time.sleep(0.02)
    except (RuntimeError, dist.DistError):  # a peer or the store is gone already: nothing to wait for
        pass


def leave_process_group() -> None:
    """Leaves the group ``init_process_group`` joined: after every rank arrives on a clean exit, at once after a crash."""
    # Rank 0 serves the rendezvous store: leaving before the others are done could fail their own exit, so a clean
    # exit waits for everyone. Not after a crash: the peers may be inside a collective that never matches a barrier.
    clean = not _launched.crashed()
    if clean and _store is not None:
        try:  # a peer still in a collective then learns this rank finished rather than hung
            _store.set(_FINISHED_KEY.format(rank=dist.get_rank()), "1")
        except (RuntimeError, dist.DistError):
            clean = False
    if clean:
        try:
            dist.barrier()
        except Exception:  # a peer is already gone: nothing left to wait for
            clean = False
    destroy_process_group(graceful=clean)


def any_rank(flags: Sequence[bool], *, key: str, timeout_s: float) -> list[bool]:
    """For each flag, whether some rank holds it; every rank calls this with the same fresh ``key``.

    One exchange through the rendezvous store (counters on rank 0's store), not a process-group collective: a
    once-per-fit decision stays off the data path (no device tensor, no NCCL kernel). Needs the store this module
    started.

    Raises:
        CollectiveTimeoutError: If a rank does not reach the exchange within ``timeout_s``.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if _store is None:
        raise RuntimeError("any_rank needs the store of a process group started by init_process_group")
    store = _store
    try:
        for index, flag in enumerate(flags):
            if flag:
                store.add(f"{key}/{index}", 1)
        store.set(f"{key}/rank/{rank}", "1")  # who arrived, for the error below
        # The last rank to arrive opens the gate: every count is final by then.
        if store.add(f"{key}/arrived", 1) == world_size:
            store.set(f"{key}/done", "1")
        store.wait([f"{key}/done"], datetime.timedelta(seconds=timeout_s))
        agreed = [store.add(f"{key}/{index}", 0) > 0 for index in range(len(flags))]
        # Rank 0 serves the store: it returns only when every rank has read, so that it may then end (a fit that
        # raises on every replica after agreeing) without cutting off a rank still reading.
        if store.add(f"{key}/read", 1) == world_size:
            store.set(f"{key}/all_read", "1")
        if rank == 0:
            store.wait([f"{key}/all_read"], datetime.timedelta(seconds=timeout_s))
        return agreed
    except (RuntimeError, dist.DistError) as err:
        absent = _store_answer(lambda: [r for r in range(world_size) if not store.check([f"{key}/rank/{r}"])])
        absent = [0] if absent is None else absent  # the store does not answer: rank 0, which serves it, does not
        raise _Failure(where=_this_rank(), rank=rank, operation="any_rank", timeout_s=timeout_s,
                       reason=f"did not reach the agreement {key!r} on every replica within {timeout_s:g}s; "
                              f"{_who(absent, world_size)}.",
                       received=f", absent_ranks={absent}").error() from err


def all_reduce(tensor: torch.Tensor, op: dist.ReduceOp, *, timeout_s: float) -> torch.Tensor:
    """All-reduces a copy of ``tensor`` across the group and returns it."""
    out = tensor.detach().clone().contiguous()
    with collective_errors("all_reduce", timeout_s=timeout_s):
        if out.device.type == "cpu":
            # NOTE: gloo aborts the process (C++ terminate) when the ranks' sizes differ, or sums garbage:
            # the shapes are compared first, one small all_gather. Not on CUDA, where reading the answer
            # would stall the stream on every reduce.
            _check_same_shapes(out, operation="all_reduce")
        dist.all_reduce(out, op=op)
    return out


def flatten(tensors: Sequence[torch.Tensor], *, dtype: torch.dtype | None = None,
            device: torch.device | None = None) -> torch.Tensor:
    """``tensors``' values in one flat buffer (as ``dtype``, on ``device``): one collective instead of one a tensor."""
    if not tensors:
        return torch.zeros(0, dtype=dtype, device=device)
    return torch.cat([t.detach().reshape(-1).to(dtype=dtype, device=device) for t in tensors])


def unflatten_into(flat: torch.Tensor, targets: Sequence[torch.Tensor]) -> None:
    """``flatten``'s inverse: copies ``flat``'s pieces into ``targets``, in order."""
    offset = 0
    for target in targets:
        target.copy_(flat[offset : offset + target.numel()].view(target.shape))
        offset += target.numel()


_SHAPE_DIMS = 6  # the dims a shape mismatch message shows


def _check_same_shapes(tensor: torch.Tensor, *, operation: str) -> None:
    """Raises ``CollectiveError`` on every rank alike when the ranks' tensors differ in shape or dtype."""
    shape = tuple(tensor.shape)
    signature = zlib.crc32(repr((shape, str(tensor.dtype))).encode())
    header = torch.tensor([signature, tensor.numel(), len(shape), *(shape + (-1,) * _SHAPE_DIMS)[:_SHAPE_DIMS]],
                          dtype=torch.int64)
    headers = [torch.empty_like(header) for _ in range(dist.get_world_size())]
    dist.all_gather(headers, header)
    if all(int(h[0]) == signature for h in headers):
        return
    described = ", ".join(f"rank {r} {_shape_of(h)}" for r, h in enumerate(headers))
    raise _Failure(where=_this_rank(), rank=dist.get_rank(), operation=operation, timeout_s=None,
                   reason="got tensors of different shapes or dtypes on the ranks, which would abort the job or "
                          f"sum unrelated values ({described}). Every rank must pass the same shape: per-example "
                          "values of an uneven last batch differ in length, so reduce them along their axis "
                          "(strategy.reduce('sum', x, axis=0)) or average them first (compute_average_loss).",
                   received=f", shapes=[{described}]").error()


def _shape_of(header: torch.Tensor) -> str:
    _, numel, ndim, *dims = (int(v) for v in header)
    return f"has {tuple(dims[:ndim])}" if ndim <= _SHAPE_DIMS else f"has {ndim} dims, {numel} elements"


@contextlib.contextmanager
def collective_errors(operation: str, *, timeout_s: float | None, tag: str | None = None) -> Iterator[None]:
    """Turns a backend's failure of a collective into an error naming the operation, this rank and the peers to blame.

    A timeout becomes ``CollectiveTimeoutError``, a closed connection ``CollectiveError``; both name the ranks (and
    hosts) that did not answer or had finished their program, found by a probe tagged alike on every rank (ranks call
    collectives in the same order) or tagged ``tag`` where given. ``timeout_s=None``: around a step, whose collectives
    run under the group's timeout; errors of the step's own code then pass unchanged.
    """
    tag = tag or _next_tag(operation)
    try:
        yield
    except (CollectiveTimeoutError, CollectiveError):
        raise  # diagnosed already
    except (RuntimeError, dist.DistError) as err:
        if dist.is_initialized() and any(word in str(err).lower() for word in _COMMUNICATION_WORDS):
            raise _diagnosed(err, operation, tag=tag, timeout_s=timeout_s).error() from err
        if timeout_s is None:
            raise
        raise RuntimeError(f"[{_this_rank()}] {operation} failed: {err}") from err


def _next_tag(operation: str) -> str:
    _calls[operation] = _calls.get(operation, 0) + 1
    return f"{operation}/{_calls[operation]}"


# Calls of each collective_errors operation so far in this process: the probe's tags.
_calls: dict[str, int] = {}

# Words of gloo's and NCCL's errors: a collective failed, rather than the user's code in the step.
_COMMUNICATION_WORDS = ("gloo", "nccl", "connection closed by peer", "connection reset by peer", "timed out",
                        "timeout", "broken pipe", "closed by peer")


@contextlib.contextmanager
def call_errors(call: str) -> Iterator[None]:
    """Names ``call``, the user's call (``fit``, ``evaluate``, ``predict``, ``strategy.run``), in a collective failure.

    The user wrote that call, not the operation; the innermost call names it (``evaluate`` for fit's validation).
    """
    try:
        yield
    except (CollectiveTimeoutError, CollectiveError) as err:
        if err.call is not None or not isinstance(err.diagnosis, _Failure):
            raise
        raise err.diagnosis.error(call).with_traceback(err.__traceback__) from err.__cause__


@dataclasses.dataclass(frozen=True)
class _Failure:
    """A failed collective as its message says it; ``error(call)`` is its exception naming the user's call."""

    where: str  # this rank as messages name it: "rank 0/2 at 10.0.0.1"
    rank: int
    operation: str
    reason: str  # what went wrong, after the subject: "did not complete within 3s; rank 1 ... did not answer"
    received: str  # the Received tail's fields after call and operation: ", unresponsive_ranks=[1]"
    timeout_s: float | None  # the bound of a timeout; None when a peer closed its connection or shapes differ

    def error(self, call: str | None = None) -> CollectiveTimeoutError | CollectiveError:
        subject = self.operation if call is None else f"{call}: {self.operation}"
        received = f"Received: {f'call={call!r}, ' if call else ''}operation={self.operation!r}{self.received}"
        message = f"[{self.where}] {subject} {self.reason} {received}"
        error: CollectiveTimeoutError | CollectiveError
        if self.timeout_s is None:
            error = CollectiveError(message, operation=self.operation, rank=self.rank, call=call)
        else:
            error = CollectiveTimeoutError(message, operation=self.operation, rank=self.rank,
                                           timeout_s=self.timeout_s, call=call)
        error.diagnosis = self
        return error


def _diagnosed(err: BaseException, operation: str, *, tag: str, timeout_s: float | None) -> _Failure:
    """What to say of a failed collective: who failed to answer, at which host, and the fix."""
    text = str(err).lower()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if timeout_s is None:
        waited = re.search(r"waiting (\d+) ?ms", text)  # gloo names the timeout it applied
        store_timeout = getattr(_store, "timeout", None)  # the group's timeout, which the store shares
        timeout_s = int(waited.group(1)) / 1000 if waited else \
            store_timeout.total_seconds() if store_timeout else float("nan")
    # NOTE: the probe waits at most 5 s more, so a hang surfaces within timeout + about 6 s (README).
    peers = _unresponsive_peers(rank, world_size, tag=tag, wait_s=min(5.0, timeout_s) if timeout_s > 0 else 5.0)
    who = _who(peers, world_size) if peers != [] else "every peer still answers, so one failed in another way; " \
        "see their logs"
    received = f", unresponsive_ranks={peers}"
    if "timed out" in text or "timeout" in text:
        return _Failure(
            where=_this_rank(), rank=rank, operation=operation, timeout_s=timeout_s, received=f"{received}, "
            f"timeout_s={timeout_s:g}",
            reason=f"did not complete within {timeout_s:g}s; {who}. If the job is only slow, raise the timeout "
                   "(CommunicationOptions(timeout_seconds=...), STRATAGEM_TIMEOUT_S or stratagem run --timeout).")
    return _Failure(where=_this_rank(), rank=rank, operation=operation, timeout_s=None, received=received,
                    reason=f"failed because a peer closed its connection; {who}.")


def _who(ranks: list[int] | None, world_size: int) -> str:
    """The ranks to blame as messages say it: which had finished their program, which did not answer."""
    if ranks is None:
        return "which peer is unknown (the process group was not started by stratagem)"
    finished = _finished_ranks(world_size) if ranks else []
    silent = [r for r in ranks if r not in finished]
    return "; ".join(part for part in (
        f"{_named([r for r in ranks if r in finished])} had finished its program and was leaving the job, so it "
        "never made this call: every rank must make the same calls (fit, evaluate, predict, strategy.run, ...) "
        "the same number of times" if len(silent) < len(ranks) else "",
        f"{_named(silent)} did not answer: stopped, hung or dead (its own log says why)" if silent else "",
    ) if part) or "no rank is missing"


# Where each rank is, as messages say it: " (worker 1 at h2:2222)" from the cluster, else " at 10.0.0.2" (the address
# gloo reaches it at); set at join.
_rank_places: list[str] = []


def _this_rank() -> str:
    rank = dist.get_rank()
    return f"rank {rank}/{dist.get_world_size()}{_place(rank)}"


def _place(rank: int) -> str:
    return _rank_places[rank] if rank < len(_rank_places) else ""


def _named(ranks: Sequence[int]) -> str:
    return ", ".join(f"rank {r}{_place(r)}" for r in ranks) or "no rank"


def _finished_ranks(world_size: int) -> list[int]:
    """Ranks that marked themselves finished (leave_process_group) in the store; [] if it does not answer."""
    store = _store
    if store is None:
        return []
    return sorted(_store_answer(lambda: [r for r in range(world_size)
                                         if store.check([_FINISHED_KEY.format(rank=r)])]) or [])


def _store_answer(ask: Callable[[], list[int]], *, within_s: float = 2.0) -> list[int] | None:
    """``ask()`` of the store within ``within_s``, on a thread; None if it does not answer by then.

    NOTE: a request to a stopped rank 0 (which serves the store) blocks without a timeout, and this process must still
    report and exit.
    """
    found: list[list[int]] = []

    def run() -> None:
        try:
            found.append(ask())
        except (RuntimeError, dist.DistError):  # the store's server is gone
            pass

    asking = threading.Thread(target=run, daemon=True)
    asking.start()
    asking.join(within_s)
    return found[0] if found else None


_FINISHED_KEY = "stratagem/finished/{rank}"


def _unresponsive_peers(rank: int, world_size: int, *, tag: str, wait_s: float) -> list[int] | None:
    """Ranks that do not mark themselves failed under ``tag`` within ``wait_s``; None without our store."""
    store = _store
    if store is None:
        return None
    keys = [f"stratagem/failed/{tag}/{r}" for r in range(world_size)]

    def ask() -> list[int]:
        deadline = time.monotonic() + wait_s
        store.set(keys[rank], "1")
        while True:
            missing = [r for r in range(world_size) if r != rank and not store.check([keys[r]])]
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.05)

    found = _store_answer(ask, within_s=wait_s + 1.0)
    if found is not None:
        return found
    return [0] if rank != 0 else None  # the store does not answer: rank 0, which serves it, does not


def wrap_ddp(module: nn.Module, *, device: torch.device, bucket_cap_mb: float | None,
             compression: Compression = None) -> nn.Module:
    """Wraps ``module`` in DDP whose gradient all-reduce SUMS instead of averaging.

    Each replica's loss is divided by the *global* batch size (tf.distribute's rule), so the sum of the replicas'
    gradients is the gradient of the mean loss over the global batch, also for an uneven last batch; DDP's average
    would divide by the world size again. ``compression`` sends the gradients compressed, still summed.
    """
    # Gradients are views into DDP's all-reduce buckets: the reduced sums are not copied back into separate .grad
    # tensors (one pass over every gradient less per step, and half the memory).
    ddp = nn.parallel.DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=bucket_cap_mb or None,
        gradient_as_bucket_view=True,
    )
    register_compression(ddp, compression)
    return ddp
