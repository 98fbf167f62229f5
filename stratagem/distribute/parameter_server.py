"""``ParameterServerStrategy``: asynchronous training, variables and optimizer state on ``ps`` tasks.

The cluster (``TF_CONFIG``) has one ``chief``, ``worker`` tasks and ``ps`` tasks, and every task may run the same
script: a ``ps`` task serves its variables (``distribute.ps.server``) and never returns from the constructor; the
chief is the coordinator (it creates the variables, so its initial values win, and ``ClusterCoordinator.schedule``
queues steps); a worker replays the chief's program and runs the steps it is handed: it pulls the current values,
computes gradients on its own batch and pushes them, and each server applies a push as it arrives with its own copy
of the optimizer. Each step is one worker's batch (``num_replicas_in_sync`` is 1); buffers (BatchNorm statistics)
stay local. ``staleness=S`` makes a server drop (and count) a push computed from values more than S pushes old.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from typing_extensions import override

from stratagem._environ import number_from_env
from stratagem.distribute import context
from stratagem.distribute.capabilities import StrategyOptimizer
from stratagem.distribute.compression import refuse_compression
from stratagem.distribute.cluster import CHIEF, PS, WORKER, ClusterResolver, TFConfigClusterResolver
from stratagem.distribute.input_context import InputContext
from stratagem.distribute.options import CommunicationOptions
from stratagem.distribute.ps import wire
from stratagem.distribute.ps.auth import Credentials
from stratagem.distribute.ps.client import PSClient, ShardedVariables
from stratagem.distribute.ps.partitioners import Partitioner
from stratagem.distribute.ps.server import optimizer_spec
from stratagem.distribute.strategy import Strategy
from stratagem.distribute.values import ReduceOp
from stratagem.errors import ConfigurationError

if TYPE_CHECKING:  # the coordinator module imports this one's users
    from stratagem.distribute.coordinator import ClusterCoordinator

WORKER_TIMEOUT_ENV = "STRATAGEM_WORKER_TIMEOUT_S"
DEFAULT_WORKER_TIMEOUT_S = 10.0


class ParameterServerStrategy(Strategy):
    """Asynchronous data parallelism: workers pull variables, push gradients; servers apply them.

    Args:
        cluster_resolver: Where the tasks are (a ``chief``, ``worker`` and ``ps`` job); default ``TF_CONFIG``.
        variable_partitioner: Splits large variables along axis 0 over the servers (``FixedShardsPartitioner``,
            ``MinSizePartitioner``, ``MaxSizePartitioner``); default one shard per variable, placed round-robin.
        staleness: Drop a push computed from values more than this many pushes old (per server); ``None`` applies
            every push.
        worker_timeout_s: A worker silent this long is declared dead and its steps rescheduled; default
            ``STRATAGEM_WORKER_TIMEOUT_S`` or 10 s.
        communication_options: Its ``timeout_seconds`` bounds every call to a server and wait for a worker or chief.

    Example:
        >>> strategy = ParameterServerStrategy(TFConfigClusterResolver())  # doctest: +SKIP
        >>> coordinator = ClusterCoordinator(strategy)  # doctest: +SKIP
    """

    def __init__(self, cluster_resolver: ClusterResolver | None = None, variable_partitioner: Partitioner | None = None,
                 *, staleness: int | None = None, worker_timeout_s: float | None = None,
                 communication_options: CommunicationOptions | None = None) -> None:
        if staleness is not None and (not isinstance(staleness, int) or staleness < 0):
            raise ValueError(f"staleness must be a non-negative int or None. Received: staleness={staleness!r}")
        refuse_compression(communication_options, "ParameterServerStrategy", "pushes gradients to its servers over gRPC")
        self._partitioner = variable_partitioner
        self._staleness = staleness
        self.timeout_s = (communication_options or CommunicationOptions()).resolved_timeout_s()
        if worker_timeout_s is not None and worker_timeout_s <= 0:
            raise ValueError(f"worker_timeout_s must be positive. Received: worker_timeout_s={worker_timeout_s}")
        self.worker_timeout_s = worker_timeout_s if worker_timeout_s is not None else number_from_env(
            WORKER_TIMEOUT_ENV, DEFAULT_WORKER_TIMEOUT_S, meaning="how many seconds a worker may stay silent")
        self._modules: list[tuple[str, nn.Module]] = []
        self.cluster_coordinator: ClusterCoordinator | None = None  # the one ClusterCoordinator of this strategy, once made
        self._names: dict[int, str] = {}  # id(parameter) -> variable name
        # server index -> its version when this process last pulled: the values its gradients are computed from
        self._pulled_versions: dict[int, int] = {}
        super().__init__(cluster_resolver=cluster_resolver if cluster_resolver is not None else TFConfigClusterResolver())

    # What the coordinator and tests read; set by _setup from the cluster (timeouts by __init__).
    task_type: str
    task_id: int
    num_workers: int
    variables: ShardedVariables
    chief_address: str  # ``host:port`` of the chief, where the coordination service listens
    credentials: Credentials  # what this task's calls prove and its servers check: the job's secret (and TLS files)

    def worker_input_context(self) -> InputContext:
        """This worker's place among the ``num_workers`` input pipelines (the chief counts as pipeline 0)."""
        return self._input_context()

    @contextlib.contextmanager
    def scheduled_step(self, step_id: int) -> Iterator[None]:
        """Runs a scheduled step on this worker: pulls current values first; pushes carry ``step_id``."""
        self.pull_all()  # the step computes on the servers' current values
        # NOTE: the step's pushes happen in the user's optimizer.step(), which takes no step id: it
        # travels in context.py's one ambient value.
        with context.scheduled_step(step_id):
            yield

    # ---- hooks -------------------------------------------------------------------------
    @override
    def _setup(self) -> None:
        resolver = self._cluster_resolver
        assert resolver is not None, "__init__ always passes a resolver"
        spec = resolver.cluster_spec().as_dict()
        missing = [job for job in (CHIEF, WORKER, PS) if not spec.get(job)]
        if missing:
            raise ConfigurationError(
                f"ParameterServerStrategy needs a cluster with 'chief', 'worker' and 'ps' jobs; this one lacks "
                f"{missing}. Add them to TF_CONFIG's cluster (or run `stratagem run --ps P --workers W script.py`). "
                f"Received: jobs={sorted(spec)}")
        self.task_type, self.task_id = str(resolver.task_type), int(resolver.task_id or 0)
        self.num_workers = len(spec[WORKER])
        self.chief_address = spec[CHIEF][0]
        self.credentials = Credentials.from_environ()
        if self.task_type == PS:
            from stratagem.distribute.ps.serve import serve

            sys.exit(serve(spec[PS][self.task_id], name=f"ps {self.task_id}", credentials=self.credentials))
        clients = [PSClient(address, timeout_s=self.timeout_s, name=f"ps {i} at {address}",
                            credentials=self.credentials) for i, address in enumerate(spec[PS])]
        self.variables = ShardedVariables(clients, self._partitioner)

    @override
    def _wrap_module(self, module: nn.Module) -> nn.Module:
        prefix = f"m{len(self._modules)}"
        self._modules.append((prefix, module))
        named = {f"{prefix}/{name}": p for name, p in module.named_parameters()}
        for name, parameter in named.items():
            self._names[id(parameter)] = name
        if self.task_type == CHIEF:
            # NOTE: the chief's initial values are the job's; its module already holds them.
            self.variables.create({name: p.detach() for name, p in named.items()})
            return module
        for name, parameter in named.items():
            self.variables.place(name, tuple(parameter.shape), parameter.dtype)
        self.variables.wait_until_created(list(named), self.timeout_s)
        self._pull_into(module, prefix)
        return module

    @override
    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        return tensor  # one replica per step: nothing to combine

    def check_can_run(self) -> None:
        """Raises unless a ``ClusterCoordinator`` schedules this strategy's steps (``NeedsCoordinator``)."""
        if self.cluster_coordinator is not None:
            return
        # As TF: without a coordinator a step would run on the chief alone, on its local copy, and
        # no worker would ever train.
        raise ConfigurationError(
            "ParameterServerStrategy runs steps on its workers: strategy.run must be called inside a function "
            "scheduled with ClusterCoordinator(strategy).schedule(...), and no ClusterCoordinator was made for this "
            "strategy. Make `coordinator = stratagem.distribute.ClusterCoordinator(strategy)` and schedule the step, "
            f"or use Model.fit. Received: strategy={self!r}, cluster_coordinator=None")

    # ---- capabilities (stratagem.distribute.capabilities) ---------------------------
    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> StrategyOptimizer:
        """``optimizer`` whose ``step()`` pushes the gradients of server-held parameters (``AppliesUpdates``)."""
        clip = next((group["global_clipnorm"] for group in optimizer.param_groups if group.get("global_clipnorm")), None)
        if clip is not None:
            # Each server updates only its own variables, so no one sees the norm over all of them.
            raise ConfigurationError(
                "global_clipnorm needs the norm of every gradient together, but with ParameterServerStrategy each "
                "parameter server applies the updates of its own variables only, so the result would differ from Keras "
                f"silently. Use clipnorm (per variable) or clipvalue instead. Received: global_clipnorm={clip}")
        return StrategyOptimizer(optimizer, self._push_then_step_local)

    def capture_remote_state(self) -> list[torch.Tensor] | None:
        """On the chief: every server's snapshot (call between steps, e.g. after ``join``)."""
        if self.task_type != CHIEF:
            return None
        self.pull_all()
        return [torch.frombuffer(bytearray(client.call_bytes("Snapshot", wire.encode({}, {}))), dtype=torch.uint8)
                for client in self.variables.clients]

    def restore_remote_state(self, state: list[torch.Tensor] | None) -> None:
        if self.task_type != CHIEF or state is None:
            return
        if len(state) != len(self.variables.clients):
            raise ConfigurationError(
                f"The checkpoint holds the state of {len(state)} parameter servers, but this job has "
                f"{len(self.variables.clients)}. Resume with the same number of ps tasks. "
                f"Received: {len(state)} snapshots")
        for client, snapshot in zip(self.variables.clients, state):
            client.call_bytes("Restore", snapshot.numpy().tobytes())
        self.pull_all()

    @override
    def _input_context(self) -> InputContext:
        worker = self.task_id if self.task_type == WORKER else 0
        return InputContext(num_input_pipelines=self.num_workers, input_pipeline_id=worker, num_replicas_in_sync=1)

    @override
    def _is_chief(self) -> bool:
        return self.task_type == CHIEF

    # ---- pulls and pushes --------------------------------------------------------------
    def pull_all(self) -> None:
        """Copies the servers' current values into every distributed module (e.g. before saving)."""
        for prefix, module in self._modules:
            self._pull_into(module, prefix)

    def _pull_into(self, module: nn.Module, prefix: str) -> None:
        named = {f"{prefix}/{name}": p for name, p in module.named_parameters()}
        values, versions = self.variables.pull(list(named))
        with torch.no_grad():
            for name, parameter in named.items():
                parameter.copy_(values[name].to(parameter.device))
        self._pulled_versions.update(versions)  # the staleness bound compares a push with what it was computed from

    def _push_then_step_local(self, optimizer: torch.optim.Optimizer) -> None:
        self._push(optimizer)  # clears the pushed gradients, so the local step leaves those parameters alone
        optimizer.step()  # parameters the servers do not hold (if any) update here

    def _push(self, optimizer: torch.optim.Optimizer) -> None:
        gradients = {}
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                name = self._names.get(id(parameter))
                if name is not None and parameter.grad is not None:
                    gradients[name] = parameter.grad.detach().cpu()
                    parameter.grad = None  # the servers apply it; this copy changes only by pulling
        if not gradients:
            return
        step = context.scheduled_step_id()
        meta: dict[str, Any] = {"optimizer": optimizer_spec(optimizer), "step": step}
        if self._staleness is not None:
            meta["staleness"] = self._staleness
        # A dropped (stale) or refused (already applied) push is counted by its server (Stats).
        self.variables.push(gradients, meta, dict(self._pulled_versions) if step is not None else None)

    def __repr__(self) -> str:
        return (f"ParameterServerStrategy(task={self.task_type}:{self.task_id}, workers={self.num_workers}, "
                f"ps={len(self.variables.clients)}, staleness={self._staleness})")
