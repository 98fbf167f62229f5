"""SLURM's variables, read into this task's place in the job.

``read_slurm_layout`` turns the variables ``srun`` sets for each task into
rank, world size, local rank and master address for ``SlurmClusterResolver``
(the public class lives in ``cluster.py``; the resolver base is in ``_cluster_spec.py``).
Here too are SLURM's compact syntaxes: nodelists (``node[01-03,07],gpu5``)
and tasks per node (``2(x3),1``). Pure Python; no torch import.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import NamedTuple

from stratagem.errors import ConfigurationError

__all__ = ["SlurmLayout", "read_slurm_layout", "expand_nodelist", "expand_tasks_per_node"]

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_TASK_COUNT = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
_INTEGER = re.compile(r"-?[0-9]+")
_VARIABLES = "SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID, SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE"


class SlurmLayout(NamedTuple):
    """This task's place in a SLURM job, in torch words."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def read_slurm_layout(environ: Mapping[str, str], port: int | None) -> SlurmLayout:
    """Reads this task's layout from SLURM's variables; see ``SlurmClusterResolver``.

    Raises:
        ConfigurationError: If a variable is missing or malformed, or the
            task layout disagrees with ``SLURM_NTASKS``.
    """
    rank, world_size = _read_int(environ, "SLURM_PROCID"), _read_int(environ, "SLURM_NTASKS", minimum=1)
    _check_below(rank, "SLURM_PROCID", world_size, "SLURM_NTASKS")
    nodelist_name = "SLURM_STEP_NODELIST" if environ.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    hosts = expand_nodelist(_read(environ, nodelist_name), nodelist_name)
    tasks_per_node = _tasks_per_node(environ, len(hosts), world_size)
    # Block placement, SLURM's default: node n holds the tasks after those of nodes 0..n-1.
    block_node = next(n for n in range(len(hosts)) if rank < sum(tasks_per_node[: n + 1]))
    node = _read_int(environ, "SLURM_NODEID", block_node)
    _check_below(node, "SLURM_NODEID", len(hosts), "num_nodes")
    local_rank = _read_int(environ, "SLURM_LOCALID", rank - sum(tasks_per_node[:block_node]))
    _check_below(local_rank, "SLURM_LOCALID", tasks_per_node[node], "num_tasks_on_node")
    return SlurmLayout(rank, world_size, local_rank, tasks_per_node[node], hosts[0], _master_port(environ, port))


def _tasks_per_node(environ: Mapping[str, str], num_nodes: int, world_size: int) -> list[int]:
    """One task count per node, from the step's layout if srun gave one, else the job's."""
    if environ.get("SLURM_STEP_TASKS_PER_NODE"):
        name = "SLURM_STEP_TASKS_PER_NODE"
        counts = expand_tasks_per_node(environ[name], name)
    elif environ.get("SLURM_NTASKS_PER_NODE"):
        name = "SLURM_NTASKS_PER_NODE"
        counts = [_read_int(environ, name, minimum=1)] * num_nodes
    else:
        name = "SLURM_TASKS_PER_NODE"
        counts = expand_tasks_per_node(_read(environ, name), name)
    if len(counts) != num_nodes or sum(counts) != world_size:
        raise ConfigurationError(
            f"{name} describes {sum(counts)} tasks on {len(counts)} nodes, but the job has SLURM_NTASKS="
            f"{world_size} on {num_nodes} nodes; local ranks would be wrong and tasks could share a GPU. "
            f"Launch the tasks with srun so the variables agree. Received: {name}={environ[name]!r}"
        )
    return counts


def _master_port(environ: Mapping[str, str], port: int | None) -> int:
    if port is not None:
        name, value = "port", port
    elif environ.get("MASTER_PORT"):
        name, value = "MASTER_PORT", _read_int(environ, "MASTER_PORT")
    else:
        # NOTE: derived from the job id so that every task picks the same port on
        # its own, and concurrent jobs sharing a node rarely pick the same one.
        return 15000 + _read_int(environ, "SLURM_JOB_ID") % 20000
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigurationError(
            f"{name} must be a port, an integer from 1 to 65535. Pass a free port that every task "
            f"can reach on the first node. Received: {name}={value!r}"
        )
    return value


def expand_nodelist(nodelist: str, name: str) -> list[str]:
    """Expands a SLURM nodelist into host names, in SLURM's order.

    Args:
        nodelist: The compact list, e.g. ``"node[01-03,07],gpu5"``.
        name: The variable it came from, quoted in error messages.

    Returns:
        The hosts, e.g. ``["node01", "node02", "node03", "node07", "gpu5"]``.

    Raises:
        ConfigurationError: If the nodelist is malformed.
    """
    hosts: list[str] = []
    for item in _split_top_level(nodelist, name):
        # Each bracket group is one axis; several groups (rack[1-2]-n[1-2]) multiply.
        parts = re.split(r"(\[[^\[\]]*\])", item)
        choices = [_expand_group(p[1:-1], nodelist, name) if p.startswith("[") else [p] for p in parts]
        hosts.extend("".join(combination) for combination in itertools.product(*choices))
    return hosts


def expand_tasks_per_node(value: str, name: str) -> list[int]:
    """Expands SLURM's tasks-per-node syntax, one count per node.

    Args:
        value: The compact counts, e.g. ``"2(x3),1"`` (three nodes with 2, one with 1).
        name: The variable it came from, quoted in error messages.

    Returns:
        The count on each node in nodelist order, e.g. ``[2, 2, 2, 1]``.

    Raises:
        ConfigurationError: If the value is malformed.
    """
    counts: list[int] = []
    for item in value.split(","):
        match = _TASK_COUNT.fullmatch(item.strip())
        if match is None or int(match.group(1)) < 1:
            raise ConfigurationError(
                f"{name} is not a valid SLURM tasks-per-node value: {item!r} is not a positive count "
                "optionally followed by a repeat such as '(x3)'. Expected for example '2(x3),1'. "
                f"Check the variable, which srun and sbatch set. Received: {name}={value!r}"
            )
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _split_top_level(nodelist: str, name: str) -> list[str]:
    """Splits at commas outside brackets; commas inside brackets separate ranges."""
    items, current, depth = [], "", 0
    for char in nodelist.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            problem = "brackets are nested" if depth > 1 else "a ']' has no matching '['"
            raise _malformed(problem, nodelist, name)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise _malformed("a '[' is never closed", nodelist, name)
    items.append(current)
    if not all(items):
        raise _malformed("it has an empty host name", nodelist, name)
    return items


def _expand_group(group: str, nodelist: str, name: str) -> list[str]:
    """Expands the inside of one bracket, e.g. ``01-03,07``, keeping zero padding."""
    numbers: list[str] = []
    for part in group.split(","):
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            raise _malformed(f"[{group}] holds {part!r}, which is not a number or a range 'a-b'", nodelist, name)
        start, end = match.group(1), match.group(2) or match.group(1)
        if int(end) < int(start):
            raise _malformed(f"the range {part!r} runs backwards", nodelist, name)
        # NOTE: SLURM pads every number to the width of the range's start ("01-10" -> 01..10).
        numbers.extend(f"{n:0{len(start)}d}" for n in range(int(start), int(end) + 1))
    return numbers


def _malformed(problem: str, nodelist: str, name: str) -> ConfigurationError:
    return ConfigurationError(
        f"{name} is not a valid SLURM nodelist: {problem}. Expected comma-separated hosts with "
        "optional bracketed ranges, for example 'node[01-03,07],gpu5'. Check the variable, which "
        f"srun and sbatch set. Received: {name}={nodelist!r}"
    )


def _read(environ: Mapping[str, str], name: str, default: str | None = None) -> str:
    value = environ.get(name) or default
    if value is None:
        raise ConfigurationError(
            f"{name} is not set, but srun sets {_VARIABLES} for every task, so this environment is "
            f"incomplete. Start the tasks with srun, or set {name}. Received: {name}=<unset>"
        )
    return value


def _read_int(environ: Mapping[str, str], name: str, default: int | None = None, *, minimum: int = 0) -> int:
    raw = _read(environ, name, None if default is None else str(default)).strip()
    if not _INTEGER.fullmatch(raw) or int(raw) < minimum:
        raise ConfigurationError(
            f"{name} must be an integer of at least {minimum}. Start the tasks with srun, which sets it, "
            f"or fix its value. Received: {name}={raw!r}"
        )
    return int(raw)


def _check_below(index: int, index_name: str, size: int, size_name: str) -> None:
    if index >= size:
        raise ConfigurationError(
            f"{index_name} must be less than {size_name}, so it runs from 0 to {size - 1}. Start the tasks "
            f"with srun, which sets consistent values. Received: {index_name}={index}, {size_name}={size}"
        )
