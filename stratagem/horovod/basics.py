"""Horovod's process basics on torch.distributed: ``init``/``shutdown``, who this process is, process sets.

``init`` reads the job's layout from the launcher's environment (``stratagem run``, torchrun, ``TF_CONFIG``, SLURM) and
joins the process group: gloo for CPU tensors, NCCL for CUDA ones. Without a launcher the job has size 1, as under
Horovod. The collectives live in ``ops``.
"""

from __future__ import annotations

import atexit
import dataclasses
from collections.abc import Sequence

import torch
import torch.distributed as dist

from stratagem.distribute import collectives
from stratagem.distribute.cluster import resolve_cluster
from stratagem.distribute.options import CommunicationOptions
from stratagem.errors import ConfigurationError

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built",
    "rocm_built", "ddl_built", "ccl_built",
]


@dataclasses.dataclass(frozen=True)
class _Layout:
    rank: int
    size: int
    local_rank: int
    local_size: int
    timeout_s: float
    owns_group: bool


class _Runtime:
    """The one per-process Horovod state: Horovod's API is module functions over it."""

    layout: _Layout | None = None


# NOTE: a module-level state object because Horovod's API is module functions (hvd.rank(), ...);
# everything else in this package reads it through _layout().
_runtime = _Runtime()


class ProcessSet:
    """A subset of the job's processes that collectives can be limited to (Horovod's ``hvd.ProcessSet``).

    Build it on every process, then register it with ``hvd.init(process_sets=[...])`` or ``hvd.add_process_set`` (a
    collective). Ranks are global ranks, ``root_rank`` of a broadcast within a set too.

    Args:
        ranks: Global ranks of the members, or ``None`` for every process.

    Example:
        >>> evens = hvd.ProcessSet([0, 2])  # doctest: +SKIP
        >>> hvd.init(process_sets=[evens])  # doctest: +SKIP
        >>> hvd.allreduce(torch.ones(1), process_set=evens)  # doctest: +SKIP
    """

    def __init__(self, ranks: Sequence[int] | None = None) -> None:
        self.ranks = sorted(set(int(r) for r in ranks)) if ranks is not None else None
        self.process_set_id: int | None = 0 if ranks is None else None
        self.group: dist.ProcessGroup | None = None  # None: the default (world) group

    def _members(self) -> list[int]:
        return self.ranks if self.ranks is not None else list(range(size()))

    def size(self) -> int:
        """Number of processes in the set."""
        return len(self._members())

    def rank(self) -> int:
        """This process's index within the set, or -1 if it is not a member."""
        members = self._members()
        return members.index(rank()) if rank() in members else -1

    def included(self) -> bool:
        """Whether this process is a member."""
        return rank() in self._members()

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks if self.ranks is not None else 'all'})"


global_process_set = ProcessSet()
_process_sets: dict[int, ProcessSet] = {}


def init(comm: object | None = None, process_sets: Sequence[ProcessSet] | None = None) -> None:
    """Joins the job's process group (Horovod's ``hvd.init``); a second call does nothing.

    Args:
        comm: Horovod's MPI communicator argument; only ``None`` is supported.
        process_sets: Process sets to register now (see ``add_process_set``).

    Raises:
        ValueError: If ``comm`` is given: there is no MPI here.
        ConfigurationError: For a malformed job, or a task outside the all-reduce group (``ps``, ``evaluator``).
        CollectiveTimeoutError: If a peer does not join within ``STRATAGEM_TIMEOUT_S`` (default 300 s).

    Example:
        >>> import stratagem.horovod as hvd
        >>> hvd.init()
        >>> hvd.size() >= 1
        True
    """
    if comm is not None:
        raise ValueError(
            "stratagem.horovod runs on torch.distributed, not MPI, so an MPI communicator cannot be used. Call "
            f"hvd.init() without comm and start the job with `stratagem run -np N script.py`. Received: comm={comm!r}")
    if _runtime.layout is None:
        _runtime.layout = _join_job()
        atexit.register(shutdown)
    for process_set in process_sets or ():
        add_process_set(process_set)


def _join_job() -> _Layout:
    timeout_s = CommunicationOptions().resolved_timeout_s()
    if dist.is_available() and dist.is_initialized():  # a group started by someone else (a strategy, the user)
        resolver = resolve_cluster()
        local_rank, local_size = (resolver.local_rank, resolver.local_world_size) if resolver else (0, 1)
        return _Layout(dist.get_rank(), dist.get_world_size(), local_rank, local_size, timeout_s, False)
    resolver = resolve_cluster()
    if resolver is None:
        return _Layout(0, 1, 0, 1, timeout_s, False)
    if resolver.rank is None:
        raise ConfigurationError(
            f"This task ({resolver.task_type!r}, index {resolver.task_id}) is not a chief or worker, so it has "
            "no place in a Horovod job. Run Horovod scripts with `stratagem run -np N` or give every task a "
            f"worker entry in TF_CONFIG. Received: task_type={resolver.task_type!r}")
    layout = _Layout(resolver.rank, resolver.world_size, resolver.local_rank, resolver.local_world_size,
                     timeout_s, resolver.world_size > 1)
    if layout.owns_group:
        # One group serves both devices: gloo carries CPU tensors (metrics, objects) and NCCL
        # carries CUDA tensors (gradients), as Horovod moves either without being told.
        cuda = torch.cuda.is_available() and dist.is_nccl_available()
        collectives.init_process_group(
            rank=layout.rank, world_size=layout.size, master_addr=resolver.master_addr,
            master_port=resolver.master_port, backend="cpu:gloo,cuda:nccl" if cuda else "gloo", timeout_s=timeout_s)
    return layout


def shutdown() -> None:
    """Leaves the process group that ``init`` joined (Horovod's ``hvd.shutdown``); safe to call twice."""
    layout, _runtime.layout = _runtime.layout, None
    for process_set in list(_process_sets.values()):
        process_set.group, process_set.process_set_id = None, None
    _process_sets.clear()
    from stratagem.horovod import _handles  # here, not at the top: _handles imports this module

    _handles.clear()  # handles of the group being left would wait on its dead work after a re-init
    if layout is not None and layout.owns_group and dist.is_initialized():
        collectives.leave_process_group()


def is_initialized() -> bool:
    """Whether ``init`` has run (and ``shutdown`` has not)."""
    return _runtime.layout is not None


def _layout() -> _Layout:
    if _runtime.layout is None:
        raise ValueError("Horovod has not been initialized: call hvd.init() first, on every process of the job.")
    return _runtime.layout


def size() -> int:
    """Number of processes in the job."""
    return _layout().size


def rank() -> int:
    """This process's global rank, 0 to ``size() - 1``."""
    return _layout().rank


def local_size() -> int:
    """Number of processes of the job on this host."""
    return _layout().local_size


def local_rank() -> int:
    """This process's index among those on this host; pick the GPU with it."""
    return _layout().local_rank


def cross_size() -> int:
    """Number of hosts, taking each host to run ``local_size()`` processes (as ``stratagem run`` starts them)."""
    layout = _layout()
    return max(1, layout.size // layout.local_size)


def cross_rank() -> int:
    """Index of this host: the launcher numbers ranks host by host, ``local_size()`` per host."""
    layout = _layout()
    return layout.rank // layout.local_size


def timeout_s() -> float:
    """The job's collective timeout in seconds (``STRATAGEM_TIMEOUT_S``, default 300)."""
    return _layout().timeout_s


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Registers a process set; a collective that every process calls in the same order (ValueError: rank outside)."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    members = process_set._members()
    if not members or min(members) < 0 or max(members) >= size():
        raise ValueError(f"A process set's ranks must lie in [0, {size()}). Received: ranks={process_set.ranks}")
    if size() > 1:
        # new_group is itself collective: every process creates every group, members or not.
        process_set.group = dist.new_group(members)
    process_set.process_set_id = max(_process_sets, default=0) + 1
    _process_sets[process_set.process_set_id] = process_set
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregisters a process set; returns whether it was registered."""
    found = _process_sets.pop(process_set.process_set_id or -1, None) is not None
    if found and process_set.group is not None and process_set.included():
        dist.destroy_process_group(process_set.group)
    process_set.group, process_set.process_set_id = None, None
    return found


def group_of(process_set: ProcessSet) -> dist.ProcessGroup | None:
    """The torch group a collective over ``process_set`` runs on (``None``: the world)."""
    if process_set is global_process_set or process_set.ranks is None:
        return None
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set!r} is not registered: pass it to hvd.init(process_sets=[...]) or "
                         "hvd.add_process_set first, on every process.")
    if not process_set.included():
        raise ValueError(f"Rank {rank()} is not a member of {process_set!r}, so it cannot take part in its collectives.")
    return process_set.group


# What this build has, for scripts that ask (Horovod's *_built / *_enabled).
def gloo_built() -> bool:
    return dist.is_available() and dist.is_gloo_available()


def nccl_built() -> bool:
    return dist.is_available() and dist.is_nccl_available() and torch.cuda.is_available()


def cuda_built() -> bool:
    return torch.cuda.is_available()


def rocm_built() -> bool:
    return torch.version.hip is not None


def _not_built() -> bool:
    return False


gloo_enabled = gloo_built
mpi_built = mpi_enabled = mpi_threads_supported = ddl_built = ccl_built = _not_built
