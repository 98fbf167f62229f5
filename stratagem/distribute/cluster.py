"""Who this process is in the training job: ``ClusterSpec`` and the cluster resolvers.

A resolver reads the layout from one source (arguments, ``TF_CONFIG``, torchrun's or SLURM's variables) and offers
TensorFlow's view (``cluster_spec()``, ``task_type``, ``task_id``) and torch's (``rank``, ``world_size``,
``local_rank``, ``master_addr``, ...); ``resolve_cluster`` picks the source. Pure Python, no torch: process groups
belong to the strategies. ``ClusterSpec`` and ``ClusterResolver`` live in ``_cluster_spec.py`` (re-exported here),
SLURM's nodelist syntax in ``_slurm.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Mapping

from stratagem.distribute._cluster_spec import (
    ClusterResolver, ClusterSpec, LauncherVariables, _check_cluster_dict, _clip, _parse_address, _Placement,
)
from stratagem.distribute._slurm import read_slurm_layout
from stratagem.errors import ConfigurationError

__all__ = [
    "ClusterSpec", "ClusterResolver", "SimpleClusterResolver", "TFConfigClusterResolver",
    "TorchrunClusterResolver", "SlurmClusterResolver", "resolve_cluster",
]

CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"
_JOB_NAMES = (CHIEF, WORKER, PS, EVALUATOR)
_TF_CONFIG_KEYS = ("cluster", "task", "rpc_layer", "environment")
_LOOPBACK = "127.0.0.1"
_TORCH_DEFAULT_PORT = 29500  # torchrun's default, used only when nobody else must agree on it


@dataclasses.dataclass(frozen=True)
class _TaskNames:
    """How a source spells the task fields, so that messages quote the user's own words."""

    where: str
    task_type: str
    task_id: str


_TF_CONFIG_NAMES = _TaskNames("TF_CONFIG", "task.type", "task.index")
_EXPLICIT_NAMES = _TaskNames("SimpleClusterResolver", "task_type", "task_id")


def _count(spec: ClusterSpec, job_name: str) -> int:
    return spec.num_tasks(job_name) if job_name in spec.jobs else 0


def _check_jobs(spec: ClusterSpec, where: str) -> None:
    """Checks the TF job rules: known names, at most one chief and one evaluator, someone to train."""
    valid = ", ".join(repr(name) for name in _JOB_NAMES)
    for job_name in spec.jobs:
        if job_name not in _JOB_NAMES:
            raise ConfigurationError(
                f"{where} cluster has an unknown job {job_name!r}; the valid job names are {valid}. "
                f"Rename the job to one of them. Received: job_name={job_name!r}")
    for job_name, role, fix in (
        (CHIEF, "rank 0 of the group", "make the others 'worker' tasks"),
        (EVALUATOR, "TF's single side-car evaluator", "remove the others"),
    ):
        if _count(spec, job_name) > 1:
            raise ConfigurationError(
                f"{where} cluster has {_count(spec, job_name)} {job_name!r} tasks, but there is at most one: it is "
                f"{role}. List one address and {fix}. Received: cluster[{job_name!r}]={_clip(spec.as_dict()[job_name])}"
            )
    if not _count(spec, CHIEF) and not _count(spec, WORKER):
        raise ConfigurationError(
            f"{where} cluster has neither a 'chief' nor a 'worker' task, so no process would train. "
            f"Add a 'worker' list (and optionally one 'chief'). Received: cluster={_clip(spec.as_dict())}")


def _resolve_task(spec: ClusterSpec, task_type: object, task_id: object, names: _TaskNames) -> tuple[str, int]:
    """Validates (task_type, task_id) against the cluster; infers them for a one-task cluster."""
    total = sum(spec.num_tasks(job) for job in spec.jobs)
    if task_type is None and task_id is None:
        if total == 1:
            return next(job for job in spec.jobs if spec.num_tasks(job)), 0
        raise ConfigurationError(
            f"{names.where} does not say which task this process is, and the cluster has {total} tasks. "
            f"Set {names.task_type} and {names.task_id}. Received: {names.task_type}=None, {names.task_id}=None")
    valid = [job for job in spec.jobs if spec.num_tasks(job)]
    if task_type not in valid:
        raise ConfigurationError(
            f"{names.where} task type is not a job of the cluster: the valid task types here are "
            f"{', '.join(map(repr, valid))}. Set {names.task_type} to one of them. "
            f"Received: {names.task_type}={_clip(task_type)}")
    task_id = _task_index(task_id, names)
    count = spec.num_tasks(task_type)
    if not 0 <= task_id < count:
        allowed = {1: "0", 2: "0 or 1"}.get(count, f"in 0..{count - 1}")
        raise ConfigurationError(
            f"{names.where} task index is out of range: the cluster has {count} {task_type!r} "
            f"task{'s' if count > 1 else ''}, so the index must be {allowed}. Set {names.task_id} to a "
            f"valid index. Received: {names.task_id}={task_id}")
    return str(task_type), task_id


def _task_index(value: object, names: _TaskNames) -> int:
    """A task index as TF reads one (``int(index)``): an int, or a string or float holding a whole number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    digits = value.strip().removeprefix("-") if isinstance(value, str) else ""
    if isinstance(value, str) and digits.isascii() and digits.isdigit():
        return int(value)
    raise ConfigurationError(
        f"{names.where} task index must be a whole number, such as 0, 1 or \"1\". Set {names.task_id} to "
        f"one. Received: {names.task_id}={_clip(value)}")


def _has_tasks(spec: ClusterSpec) -> bool:
    return any(spec.num_tasks(job) for job in spec.jobs)


def _group(spec: ClusterSpec) -> list[tuple[str, int]]:
    # NOTE: as in TF's MultiWorkerMirroredStrategy the all-reduce group is the
    # chief, then the workers in index order; with no chief, worker 0 leads.
    return [(CHIEF, 0)] * _count(spec, CHIEF) + [(WORKER, i) for i in range(_count(spec, WORKER))]


def describe_group(resolver: ClusterResolver | None) -> list[str] | None:
    """Each rank of the all-reduce group as "worker 1 at h2:2222", for messages; None without addresses."""
    spec = resolver.cluster_spec() if resolver is not None else None
    if spec is None or not _has_tasks(spec):
        return None
    return [f"{job} {index} at {spec.task_address(job, index)}" for job, index in _group(spec)]


def _placement_from_spec(spec: ClusterSpec, task_type: str, task_id: int) -> _Placement:
    group = _group(spec)
    addresses = [_parse_address(spec.task_address(job, i), f"cluster[{job!r}][{i}]", "ClusterSpec") for job, i in group]
    hosts = [host.lower() for host, _ in addresses]
    rank = group.index((task_type, task_id)) if (task_type, task_id) in group else None
    local_rank, local_world_size = 0, 1  # a ps or evaluator task is alone outside the group
    if rank is not None:
        # Hosts are compared as written: 'localhost' and '127.0.0.1' count as different hosts.
        same_host = [r for r, host in enumerate(hosts) if host == hosts[rank]]
        local_rank, local_world_size = same_host.index(rank), len(same_host)
    return _Placement(task_type, task_id, rank, len(group), local_rank, local_world_size, *addresses[0])


class SimpleClusterResolver(ClusterResolver):
    """A resolver for a cluster given in code, like ``tf.distribute.cluster_resolver.SimpleClusterResolver``.

    Args:
        cluster_spec: A ``ClusterSpec`` or a dict of job name -> addresses.
        task_type: This process's job ('chief', 'worker', 'ps', 'evaluator'); with ``task_id``, may be left out when
            the cluster has one task.
        task_id: This process's index within its job.
        rpc_layer: TF's RPC protocol name, kept for compatibility; unused.

    Raises:
        ConfigurationError: If the cluster or the task is invalid.

    Example:
        >>> spec = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]}
        >>> SimpleClusterResolver(spec, "worker", 0).rank
        1
    """

    def __init__(self, cluster_spec: ClusterSpec | dict[str, list[str]], task_type: str | None = None,
                 task_id: int | None = None, *, rpc_layer: str | None = None) -> None:
        spec = ClusterSpec(cluster_spec)
        _check_jobs(spec, _EXPLICIT_NAMES.where)
        task = _resolve_task(spec, task_type, task_id, _EXPLICIT_NAMES)
        super().__init__(_placement_from_spec(spec, *task), cluster=spec, rpc_layer=rpc_layer)


class TFConfigClusterResolver(ClusterResolver):
    """A resolver that reads TensorFlow's ``TF_CONFIG`` JSON.

    ``{"cluster": {job: [addresses]}, "task": {"type": ..., "index": ...}}``, optionally with TF's ``"rpc_layer"`` and
    ``"environment"``; ``"task"`` may be left out for a one-task cluster. Other keys get one warning on the chief.

    Args:
        environ: Variables to read; default ``os.environ``.

    Raises:
        ConfigurationError: If ``TF_CONFIG`` is unset, not valid JSON, or describes an invalid cluster or task.
            One without tasks (``{}``, an empty cluster) is one local worker, as in TF.

    Example:
        >>> env = {"TF_CONFIG": '{"cluster": {"worker": ["h1:2222", "h2:2222"]},'
        ...                     ' "task": {"type": "worker", "index": 0}}'}
        >>> TFConfigClusterResolver(env).is_chief()
        True
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        config = _load_tf_config(os.environ if environ is None else environ)
        # "cluster": null is refused, as TF does; only a missing or empty cluster is local training.
        spec = ClusterSpec(_check_cluster_dict(config["cluster"], "TF_CONFIG") if "cluster" in config else {})
        if spec.jobs and not _has_tasks(spec):
            raise ConfigurationError(
                f"TF_CONFIG cluster names jobs but lists no task address, so there is no task to be (TF refuses "
                "it too). List one 'host:port' per task, e.g. {\"worker\": [\"node1:2222\", \"node2:2222\"]}, or "
                f"leave the cluster out for one local worker. Received: cluster={_clip(spec.as_dict())}")
        task = config.get("task") or {}
        self.environment: str = config.get("environment") or ""  # TF's field; no effect here
        if _has_tasks(spec):
            _check_jobs(spec, "TF_CONFIG")
            task_type, task_id = _resolve_task(spec, task.get("type"), task.get("index"), _TF_CONFIG_NAMES)
            placement = _placement_from_spec(spec, task_type, task_id)
        else:  # as TF: no cluster ({} or an empty one) is local training, one worker
            placement = _Placement(WORKER, 0, 0, 1, 0, 1, _LOOPBACK, _TORCH_DEFAULT_PORT)
        super().__init__(placement, cluster=spec, rpc_layer=config.get("rpc_layer"))
        ignored = [k for k in config if k not in _TF_CONFIG_KEYS]
        ignored += [f"task.{k}" for k in task if k not in ("type", "index")]
        if ignored and self.is_chief():
            # Warned on the chief only, so a 64-task job logs it once.
            warnings.warn(f"TF_CONFIG keys {ignored} are not used by stratagem and are ignored.", stacklevel=2)


def _load_tf_config(environ: Mapping[str, str]) -> dict:
    text = environ.get("TF_CONFIG", "")
    if not text.strip():
        raise ConfigurationError(
            "TF_CONFIG is not set, so there is no cluster to read. Set TF_CONFIG to the job's JSON, or "
            f"use resolve_cluster(), which falls back to other sources. Received: TF_CONFIG={text!r}")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigurationError(
            f"TF_CONFIG is not valid JSON: {err.msg} at line {err.lineno} column {err.colno} (char {err.pos}). "
            f"Fix the JSON; check quotes, which must be double. Received: TF_CONFIG={_clip(text)}"
        ) from err
    if not isinstance(config, dict):
        raise ConfigurationError(
            'TF_CONFIG must be a JSON object such as {"cluster": {...}, "task": {...}}. Set it that way. '
            f"Received: TF_CONFIG={_clip(text)}")
    if config.get("task") is not None and not isinstance(config["task"], dict):
        raise ConfigurationError(
            'TF_CONFIG task must be an object such as {"type": "worker", "index": 0}. Set it that way. '
            f"Received: task={_clip(config['task'])}")
    for key in ("rpc_layer", "environment"):
        if config.get(key) is not None and not isinstance(config[key], str):
            raise ConfigurationError(
                f"TF_CONFIG {key} must be a string, as in TF. Set it to one or remove it. "
                f"Received: {key}={_clip(config[key])}")
    return config


class TorchrunClusterResolver(ClusterResolver):
    """A resolver that reads the variables torchrun (and ``stratagem run``) set.

    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (these two default to the first two: all on this
    host), ``MASTER_ADDR`` and ``MASTER_PORT`` (a lone process may leave them out: 127.0.0.1 and 29500, torchrun's
    default; a larger job must set both); each process is a ``'worker'`` with ``task_id == rank``, and
    ``cluster_spec()`` is empty: torchrun names no address but the master's.

    Args:
        environ: Variables to read; default ``os.environ``.

    Raises:
        ConfigurationError: If a variable is missing, not an integer, or out of range.

    Example:
        >>> env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}
        >>> TorchrunClusterResolver(env).local_rank
        1
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = LauncherVariables(
            os.environ if environ is None else environ,
            sets="torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together",
            unset_fix="Set {name}, or start the job with torchrun or `stratagem run`",
            integer_fix="Set it to one, or start the job with torchrun, which sets it.",
            below_fix="Fix the variables, which torchrun sets consistently.",
        )
        rank, world_size = env.integer("RANK"), env.integer("WORLD_SIZE", minimum=1)
        env.check_below(rank, "RANK", world_size, "WORLD_SIZE")
        local_rank = env.integer("LOCAL_RANK", rank)
        local_world_size = env.integer("LOCAL_WORLD_SIZE", world_size, minimum=1)
        env.check_below(local_rank, "LOCAL_RANK", local_world_size, "LOCAL_WORLD_SIZE")
        # A lone process has no peers to meet, so nobody needs to agree on an address.
        alone = world_size == 1
        master_addr = env.get("MASTER_ADDR", _LOOPBACK if alone else None)
        master_port = env.integer("MASTER_PORT", _TORCH_DEFAULT_PORT if alone else None, minimum=1, maximum=65535)
        placement = _Placement(WORKER, rank, rank, world_size, local_rank, local_world_size, master_addr, master_port)
        super().__init__(placement)


class SlurmClusterResolver(ClusterResolver):
    """A resolver that reads the variables ``srun`` sets for each task.

    Rank and world size are ``SLURM_PROCID`` and ``SLURM_NTASKS``; hosts come from ``SLURM_STEP_NODELIST`` (else
    ``SLURM_JOB_NODELIST``), tasks per node from ``SLURM_STEP_TASKS_PER_NODE`` (else ``SLURM_NTASKS_PER_NODE``, else
    ``SLURM_TASKS_PER_NODE``), the local rank from ``SLURM_LOCALID`` and ``SLURM_NODEID``, else SLURM's default block
    placement. The master is the first host, its port ``port``, else ``MASTER_PORT``, else ``15000 + SLURM_JOB_ID %
    20000`` (every task computes it alike). Each task is a ``'worker'`` with ``task_id == rank``; ``cluster_spec()``
    is empty. Run under ``srun``: a batch script alone is one process that sees the allocation's ``SLURM_NTASKS`` and
    would wait for peers that never start.

    Args:
        environ: Variables to read; default ``os.environ``.
        port: Rendezvous port of rank 0, overriding the variables.

    Raises:
        ConfigurationError: If a variable is missing or malformed, or the task layout disagrees with ``SLURM_NTASKS``.

    Example:
        >>> env = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7",
        ...        "SLURM_JOB_NODELIST": "gpu[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}
        >>> r = SlurmClusterResolver(env)
        >>> r.master_addr, r.master_port, r.local_rank
        ('gpu1', 15007, 0)
    """

    def __init__(self, environ: Mapping[str, str] | None = None, port: int | None = None) -> None:
        super().__init__(read_slurm_layout(os.environ if environ is None else environ, port))


def resolve_cluster(*, cluster_spec: ClusterSpec | dict[str, list[str]] | None = None, task_type: str | None = None,
                    task_id: int | None = None, environ: Mapping[str, str] | None = None) -> ClusterResolver | None:
    """Finds out who this process is in the job, from the first source that is present.

    Explicit args, then ``TF_CONFIG`` (one without tasks is local training and skipped, as in TF), torchrun's variables
    (``RANK``), SLURM's (``SLURM_PROCID`` and ``SLURM_NTASKS``), else None (a single process). A source that is present
    but malformed raises; it never falls through to the next.

    Args:
        cluster_spec: An explicit cluster; ``task_type``/``task_id`` then name this task.
        task_type: This process's job, with ``cluster_spec``.
        task_id: This process's index within its job, with ``cluster_spec``.
        environ: Variables to read; default ``os.environ``.

    Raises:
        ConfigurationError: If the chosen source is malformed, or a task is given without ``cluster_spec``.

    Example:
        >>> resolve_cluster(environ={}) is None
        True
        >>> resolve_cluster(environ={"RANK": "0", "WORLD_SIZE": "1"}).world_size
        1
    """
    env = os.environ if environ is None else environ
    if cluster_spec is not None:
        return SimpleClusterResolver(cluster_spec, task_type, task_id)
    if task_type is not None or task_id is not None:
        raise ConfigurationError(
            "task_type and task_id name a task of a cluster, but no cluster_spec was given. Pass "
            "cluster_spec too, or leave all three unset to read the environment. "
            f"Received: cluster_spec=None, task_type={task_type!r}, task_id={task_id!r}")
    if env.get("TF_CONFIG", "").strip():
        resolver = TFConfigClusterResolver(env)
        if _has_tasks(resolver.cluster_spec()):  # TF_CONFIG "{}" is local training: the next source decides
            return resolver
    if "RANK" in env:
        return TorchrunClusterResolver(env)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return SlurmClusterResolver(env)
    return None
