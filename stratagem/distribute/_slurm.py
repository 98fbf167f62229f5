"""SLURM's variables, read into this task's place in the job.

``read_slurm_layout`` turns the variables ``srun`` sets for each task into rank, world size, local rank and master
address for ``SlurmClusterResolver`` (the public class lives in ``cluster.py``; the resolver base is in
``_cluster_spec.py``). Here too are SLURM's compact syntaxes: nodelists (``node[01-03,07],gpu5``) and tasks per node
(``2(x3),1``). Pure Python; no torch import.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

from stratagem.distribute._cluster_spec import LauncherVariables, _Placement
from stratagem.errors import ConfigurationError

__all__ = ["read_slurm_layout", "expand_nodelist", "expand_tasks_per_node"]

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_TASK_COUNT = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
_VARIABLES = "SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID, SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE"


def read_slurm_layout(environ: Mapping[str, str], port: int | None) -> _Placement:
    """This task's place, from SLURM's variables: a ``'worker'`` whose ``task_id`` is its rank.

    Raises:
        ConfigurationError: If a variable is missing or malformed, or the task layout disagrees with
            ``SLURM_NTASKS``.
    """
    env = LauncherVariables(
        environ, sets=f"srun sets {_VARIABLES} for every task", unset_fix="Start the tasks with srun, or set {name}",
        integer_fix="Start the tasks with srun, which sets it, or fix its value.",
        below_fix="Start the tasks with srun, which sets consistent values.",
    )
    rank, world_size = env.integer("SLURM_PROCID"), env.integer("SLURM_NTASKS", minimum=1)
    env.check_below(rank, "SLURM_PROCID", world_size, "SLURM_NTASKS")
    nodelist_name = "SLURM_STEP_NODELIST" if environ.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    hosts = expand_nodelist(env.get(nodelist_name), nodelist_name)
    tasks_per_node = _tasks_per_node(env, len(hosts), world_size)
    # Block placement, SLURM's default: node n holds the tasks after those of nodes 0..n-1.
    block_node = next(n for n in range(len(hosts)) if rank < sum(tasks_per_node[: n + 1]))
    node = env.integer("SLURM_NODEID", block_node)
    env.check_below(node, "SLURM_NODEID", len(hosts), "num_nodes")
    local_rank = env.integer("SLURM_LOCALID", rank - sum(tasks_per_node[:block_node]))
    env.check_below(local_rank, "SLURM_LOCALID", tasks_per_node[node], "num_tasks_on_node")
    return _Placement("worker", rank, rank, world_size, local_rank, tasks_per_node[node], hosts[0],
                      _master_port(env, port))


def _tasks_per_node(env: LauncherVariables, num_nodes: int, world_size: int) -> list[int]:
    """One task count per node, from the step's layout if srun gave one, else the job's."""
    if env.environ.get("SLURM_STEP_TASKS_PER_NODE"):
        name = "SLURM_STEP_TASKS_PER_NODE"
        counts = expand_tasks_per_node(env.environ[name], name)
    elif env.environ.get("SLURM_NTASKS_PER_NODE"):
        name = "SLURM_NTASKS_PER_NODE"
        counts = [env.integer(name, minimum=1)] * num_nodes
    else:
        name = "SLURM_TASKS_PER_NODE"
        counts = expand_tasks_per_node(env.get(name), name)
    if len(counts) != num_nodes or sum(counts) != world_size:
        raise ConfigurationError(
            f"{name} describes {sum(counts)} tasks on {len(counts)} nodes, but the job has SLURM_NTASKS="
            f"{world_size} on {num_nodes} nodes; local ranks would be wrong and tasks could share a GPU. "
            f"Launch the tasks with srun so the variables agree. Received: {name}={env.environ[name]!r}")
    return counts


def _master_port(env: LauncherVariables, port: int | None) -> int:
    if port is not None:
        name, value = "port", port
    elif env.environ.get("MASTER_PORT"):
        name, value = "MASTER_PORT", env.integer("MASTER_PORT")
    else:
        # NOTE: derived from the job id so that every task picks the same port on its own, and concurrent jobs sharing
        # a node rarely pick the same one.
        return 15000 + env.integer("SLURM_JOB_ID") % 20000
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigurationError(
            f"{name} must be a port, an integer from 1 to 65535. Pass a free port that every task "
            f"can reach on the first node. Received: {name}={value!r}")
    return value


def expand_nodelist(nodelist: str, name: str) -> list[str]:
    """Expands a SLURM nodelist (``"node[01-03,07],gpu5"``) into host names, in SLURM's order.

    ``name`` is the variable it came from, quoted in error messages.

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
    """Expands SLURM's tasks-per-node syntax into one count per node (``"2(x3),1"``: ``[2, 2, 2, 1]``).

    ``name`` is the variable it came from, quoted in error messages.

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
                f"Check the variable, which srun and sbatch set. Received: {name}={value!r}")
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
        f"srun and sbatch set. Received: {name}={nodelist!r}")
