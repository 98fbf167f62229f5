"""``stratagem run --nnodes MIN:MAX``: an elastic job on torch.distributed.elastic's c10d rendezvous.

One ``stratagem run`` per host is torch's elastic agent for that host's
``-n`` workers. The agents meet at ``--master-addr:--master-port`` (the
rendezvous endpoint; the first agent there serves it). When a host (its
agent and workers) dies, the other agents' workers fail in their next
collective; the agents stop them and meet again without it, and the job goes
on with fewer workers once at least MIN hosts are there, from the last
``BackupAndRestore`` backup. A host started later waits at the rendezvous and
the running agents restart their workers to take it in. Each restart after a
failure uses one of ``--max-restarts``; a host joining does not.

Kept from stratagem's own launcher: the workers' own store is served by
stratagem's rank 0 bound to its host's address (torch's shared agent store
is turned off), output lines carry ``[rank r]``. Not kept: the rendezvous
store of torch's c10d backend listens on every interface of the host that
serves it, and its blame of a failed worker is torch's (the first failure it
sees), not the supervisor's root-cause choice.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass

from stratagem.distribute._interfaces import interface_address, is_loopback, route_interface
from stratagem.errors import ConfigurationError
from stratagem.launcher.environment import LAUNCHED_ENV


@dataclass(frozen=True)
class ElasticConfig:
    """An elastic job's agent on this host.

    Args:
        command: The worker command line.
        min_nodes: Hosts the job needs to run (training waits, or stops, below it).
        max_nodes: Hosts the job takes at most.
        nproc_per_node: Workers on this host.
        master_addr: Host of the rendezvous endpoint.
        master_port: Its port; the same on every host.
        max_restarts: Restarts after failures (a host joining costs none).
        timeout_s: Rendezvous join timeout and the workers' collective timeout.
    """

    command: tuple[str, ...]
    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int | None
    max_restarts: int = 3
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise ConfigurationError(
                "--nnodes MIN:MAX needs 1 <= MIN <= MAX: the fewest and the most hosts the job runs on. "
                f"Received: min_nodes={self.min_nodes}, max_nodes={self.max_nodes}")
        if self.master_port is None:
            raise ConfigurationError(
                "An elastic job (--nnodes MIN:MAX) needs --master-port: every host's agent meets at "
                "--master-addr:--master-port, so all must name the same one. Received: master_port=None")


def parse_nnodes(text: str) -> tuple[int, int]:
    """``"2"`` -> (2, 2); ``"2:4"`` -> (2, 4), as torchrun's ``--nnodes``."""
    low, sep, high = text.partition(":")
    try:
        return int(low), int(high) if sep else int(low)
    except ValueError:
        raise ValueError(f"--nnodes takes N or MIN:MAX (whole numbers), as torchrun. Received: nnodes={text!r}") from None


def run(config: ElasticConfig) -> int:
    """Runs this host's agent until the job ends; returns 0 when it succeeded, 1 when it failed."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    timeout_s = config.timeout_s or 300.0
    if config.max_restarts == 0:
        warnings.warn("An elastic job with --max-restarts 0 ends at the first lost host: going on without it is a "
                      "restart. Pass --max-restarts K to survive K losses.", stacklevel=2)
    # NOTE: with torch's shared agent store MASTER_PORT would be the agent's store, listening on every
    # interface; without it rank 0 of our workers serves the job's store, bound to MASTER_ADDR only.
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    os.environ.update({LAUNCHED_ENV: "1", "PYTHONUNBUFFERED": "1", "STRATAGEM_TIMEOUT_S": f"{timeout_s:g}"})
    launch = LaunchConfig(
        min_nodes=config.min_nodes, max_nodes=config.max_nodes, nproc_per_node=config.nproc_per_node,
        run_id=os.environ.get("STRATAGEM_RUN_ID", f"stratagem-{config.master_port}"), rdzv_backend="c10d",
        rdzv_endpoint=f"{config.master_addr}:{config.master_port}",
        # A dead host is noticed after about 3 missed 1 s heartbeats; a round closes 1 s after MIN arrived.
        rdzv_configs={"join_timeout": timeout_s, "last_call_timeout": 1, "keep_alive_interval": 1,
                      "keep_alive_max_attempt": 3},
        max_restarts=config.max_restarts, monitor_interval=0.5, local_addr=_local_address(config.master_addr),
        # torch prefixes only the lines it tees from its log files: tee both streams, files in a temp dir.
        logs_specs=DefaultLogsSpecs(tee=Std.ALL), log_line_prefix_template="[rank ${rank}] ",
    )
    try:
        elastic_launch(launch, config.command[0])(*config.command[1:])
    except ChildFailedError as err:
        print(f"stratagem: the elastic job failed: {err.format_msg()}", file=sys.stderr, flush=True)
        return 1
    return 0


def _local_address(master_addr: str) -> str:
    """The address the other hosts reach this one at: loopback for a loopback job, else the route's source."""
    if is_loopback(master_addr):
        return "127.0.0.1"
    name = route_interface(master_addr)
    address = interface_address(name) if name else None
    if address is None:
        raise ConfigurationError(
            f"Cannot tell which of this host's addresses reaches the rendezvous host {master_addr!r}. Check that "
            f"it resolves and is routable from here. Received: master_addr={master_addr!r}")
    return address

