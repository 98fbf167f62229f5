"""The job's layout as data: ``ClusterSpec`` and the ``ClusterResolver`` base.

``ClusterSpec`` maps job names to checked ``host:port`` addresses, and ``ClusterResolver`` is the base the resolvers
in ``cluster.py`` share; both are public through ``cluster.py``, which re-exports them. Here too are the address
parsing and the ``_Placement`` a resolver hands to its base. Pure Python; no torch import.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from stratagem.errors import ConfigurationError

_DIGITS = re.compile(r"[0-9]+")
_INTEGER = re.compile(r"-?[0-9]+")


def _clip(value: object, limit: int = 200) -> str:
    """repr() of a received value, cut short so a huge TF_CONFIG cannot flood a log."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_address(address: str, slot: str, where: str) -> tuple[str, int]:
    """Splits ``host:port`` or ``[ipv6]:port`` into (host, port); ``slot`` names it in errors."""
    example = "Use 'host:port', for example 'node1:2222', or '[::1]:2222' for IPv6."
    received = f"Received: {slot}={address!r}"
    scheme, sep, rest = address.partition("://")
    if sep:
        raise ConfigurationError(
            f"{where} address {slot} starts with the protocol '{scheme}://'; addresses are plain host:port, as in "
            f"TF (the protocol is TF_CONFIG's rpc_layer). Write {rest!r}. {received}")
    if address != address.strip() or any(c.isspace() for c in address):
        raise ConfigurationError(
            f"{where} address {slot} contains whitespace, so its host would not resolve. Remove the spaces: "
            f"{''.join(address.split())!r}. {received}")
    if address.startswith("["):
        host, closed, rest = address[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ConfigurationError(f"{where} address {slot} has an unclosed or misplaced ']'. {example} {received}")
        port = rest[1:]
    else:
        host, colon, port = address.rpartition(":")
        if not colon:
            host, port = address, ""
        elif ":" in host:
            raise ConfigurationError(
                f"{where} address {slot} looks like an IPv6 address without brackets, so its port is "
                f"ambiguous. Put the host in brackets: '[{host}]:{port}'. {received}")
    if not port:
        raise ConfigurationError(f"{where} address {slot} has no port; every task needs one. {example} {received}")
    if not host:
        raise ConfigurationError(f"{where} address {slot} has an empty host. {example} {received}")
    if not _DIGITS.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise ConfigurationError(
            f"{where} address {slot} has port {port!r}, but a port is an integer from 1 to 65535. "
            f"Use the port the task listens on. {received}")
    return host, int(port)


@dataclasses.dataclass(frozen=True)
class LauncherVariables:
    """Reads the variables a launcher (torchrun, srun) sets; errors say who ``sets`` them and each fix."""

    environ: Mapping[str, str]
    sets: str
    unset_fix: str  # "{name}" stands for the variable
    integer_fix: str
    below_fix: str

    def get(self, name: str, default: str | None = None) -> str:
        value = self.environ.get(name) or default
        if value is None:
            raise ConfigurationError(f"{name} is not set, but {self.sets}, so this environment is incomplete. "
                                     f"{self.unset_fix.format(name=name)}. Received: {name}=<unset>")
        return value

    def integer(self, name: str, default: int | None = None, *, minimum: int = 0, maximum: int | None = None) -> int:
        raw = self.get(name, None if default is None else str(default)).strip()
        if not _INTEGER.fullmatch(raw) or not minimum <= int(raw) <= (maximum or int(raw)):
            expected = f"from {minimum} to {maximum}" if maximum else f"of at least {minimum}"
            raise ConfigurationError(f"{name} must be an integer {expected}. {self.integer_fix} "
                                     f"Received: {name}={raw!r}")
        return int(raw)

    def check_below(self, index: int, index_name: str, size: int, size_name: str) -> None:
        if index >= size:
            raise ConfigurationError(
                f"{index_name} must be less than {size_name}, so it runs from 0 to {size - 1}. {self.below_fix} "
                f"Received: {index_name}={index}, {size_name}={size}")


def _check_cluster_dict(cluster: object, where: str) -> dict[str, list[str]]:
    """Validates a job -> addresses mapping and returns a plain copy of it."""
    if not isinstance(cluster, Mapping):
        raise ConfigurationError(
            f"{where} cluster must be an object that maps job names to lists of 'host:port' addresses, "
            'for example {"worker": ["node1:2222", "node2:2222"]}. Set the cluster this way. '
            f"Received: cluster={_clip(cluster)}")
    checked: dict[str, list[str]] = {}
    seen: dict[tuple[str, int], tuple[str, str]] = {}  # (host, port) -> (slot, address)
    for job_name, addresses in cluster.items():
        if not isinstance(addresses, (list, tuple)) or not all(isinstance(a, str) for a in addresses):
            raise ConfigurationError(
                f"{where} cluster[{job_name!r}] must be a list of 'host:port' strings, one per task. "
                f"Write it as a JSON list of strings. Received: cluster[{job_name!r}]={_clip(addresses)}")
        for index, address in enumerate(addresses):
            slot = f"cluster[{job_name!r}][{index}]"
            host, port = _parse_address(address, slot, where)
            if (host.lower(), port) in seen:
                other_slot, other_address = seen[(host.lower(), port)]
                raise ConfigurationError(
                    f"{where} lists one address for two tasks, {other_slot} and {slot}: each task is its own "
                    "process and needs its own host:port (TF rejects this as one task listed twice). Give "
                    f"each task a distinct address. Received: {other_slot}={other_address!r}, {slot}={address!r}")
            seen[(host.lower(), port)] = (slot, address)
        checked[job_name] = list(addresses)
    return checked


class ClusterSpec:
    """Mapping of job name -> list of 'host:port' addresses, as ``tf.train.ClusterSpec``.

    Task ``i`` of a job is the ``i``-th address in its list. Addresses are checked when the spec is built: each
    needs a host and a port in 1..65535 (IPv6 hosts in brackets), and no address may appear twice.

    Args:
        cluster: A dict such as ``{"worker": ["node1:2222", "node2:2222"]}``, or another ``ClusterSpec`` to copy.

    Raises:
        ConfigurationError: If the mapping or any address is malformed.

    Example:
        >>> spec = ClusterSpec({"chief": ["node0:2222"], "worker": ["node1:2222"]})
        >>> spec.jobs
        ['chief', 'worker']
        >>> spec.task_address("worker", 0)
        'node1:2222'
    """

    def __init__(self, cluster: dict[str, list[str]] | ClusterSpec) -> None:
        source = cluster.as_dict() if isinstance(cluster, ClusterSpec) else cluster
        self._cluster = _check_cluster_dict(source, "ClusterSpec")

    def as_dict(self) -> dict[str, list[str]]:
        """Returns a copy as ``{job_name: [address, ...]}``, jobs sorted by name."""
        return {job: list(self._cluster[job]) for job in self.jobs}

    @property
    def jobs(self) -> list[str]:
        """The job names, sorted."""
        return sorted(self._cluster)

    def num_tasks(self, job_name: str) -> int:
        """Returns the number of tasks of ``job_name``; raises ``ValueError`` for an unknown job."""
        return len(self._addresses(job_name))

    def task_address(self, job_name: str, task_index: int) -> str:
        """Returns the 'host:port' of task ``task_index`` of ``job_name``; raises ``ValueError`` if absent."""
        addresses = self._addresses(job_name)
        if not 0 <= task_index < len(addresses):
            raise ValueError(
                f"Job {job_name!r} has {len(addresses)} tasks, so task_index must be in "
                f"0..{len(addresses) - 1}. Pass a valid index. Received: task_index={task_index}")
        return addresses[task_index]

    def _addresses(self, job_name: str) -> list[str]:
        if job_name not in self._cluster:
            raise ValueError(
                f"The cluster has no job {job_name!r}; its jobs are {self.jobs}. Use one of them. "
                f"Received: job_name={job_name!r}")
        return self._cluster[job_name]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClusterSpec) and self._cluster == other._cluster

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"

    def __bool__(self) -> bool:
        return bool(self._cluster)


@dataclasses.dataclass(frozen=True)
class _Placement:
    """This process's place in the job, as a resolver hands it to ``ClusterResolver``."""

    task_type: str | None
    task_id: int | None
    rank: int | None
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


class ClusterResolver:
    """What a strategy needs to know about the job, shaped like TF's ``ClusterResolver``.

    The TF view is ``cluster_spec()``, ``task_type`` and ``task_id``. The torch view describes the synchronous
    all-reduce group, which is the chief (if any) followed by the workers: ``rank`` is ``None`` for tasks outside it
    (``ps``, ``evaluator``), and ``local_rank``/``local_world_size`` count group members on this host (``0`` and
    ``1`` outside the group). A resolver validates its source when it is constructed.

    Example:
        >>> resolver = SimpleClusterResolver({"worker": ["h1:2222", "h2:2222"]}, "worker", 1)
        >>> resolver.rank, resolver.world_size, resolver.is_chief()
        (1, 2, False)
    """

    # The TF view; rpc_layer is TF's protocol field (e.g. "grpc"), kept but unused.
    task_type: str | None  # "chief", "worker", "ps" or "evaluator"
    task_id: int | None  # index of this task within its job
    rpc_layer: str | None
    # The torch view of the all-reduce group. Set once by __init__; treat as read-only.
    rank: int | None  # None for tasks outside the group (ps, evaluator)
    world_size: int  # members of the group
    local_rank: int  # index among group members on this host
    local_world_size: int  # group members on this host
    master_addr: str  # host of rank 0; an IPv6 host without brackets
    master_port: int  # port of rank 0

    def __init__(self, placement: _Placement, *, cluster: ClusterSpec | None = None,
                 rpc_layer: str | None = None) -> None:
        for field in dataclasses.fields(placement):
            setattr(self, field.name, getattr(placement, field.name))
        self.rpc_layer = rpc_layer
        self._spec = cluster if cluster is not None else ClusterSpec({})

    def cluster_spec(self) -> ClusterSpec:
        """Returns the cluster; empty where the source lists no task addresses (torchrun, SLURM)."""
        return ClusterSpec(self._spec)

    def is_chief(self) -> bool:
        """Returns whether this process is rank 0 of the group, the one that writes files."""
        return self.rank == 0

    def __repr__(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return (
            f"{type(self).__name__}(task_type={self.task_type!r}, task_id={self.task_id}, rank={self.rank}, "
            f"world_size={self.world_size}, master={host}:{self.master_port})")
