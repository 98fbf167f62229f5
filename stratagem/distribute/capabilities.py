"""Optional strategy capabilities: small protocols, implemented only by the strategies that have them.

The ``Strategy`` base keeps the tf.distribute surface and six hooks. What only some strategies do is declared here
and checked with ``has(strategy, Protocol)``, so the training loop asks "can this strategy do X?", never "is this
strategy Y?". Each protocol's docstring names what it means; ``StrategyOptimizer`` is what ``AppliesUpdates``
strategies return.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
from typing_extensions import TypeIs

_T = TypeVar("_T")


# NOTE: typed Callable[..., T], not type[T]: mypy refuses a protocol class where type[T] is expected (type-abstract).
def has(obj: object, capability: Callable[..., _T]) -> TypeIs[_T]:
    """Whether ``obj``'s class implements ``capability`` (one of the protocols below): ``isinstance`` by class.

    Some checks run every step. Python 3.11's ``isinstance`` against a runtime-checkable protocol walks the
    protocol's members on each call (7-12 us measured); ``issubclass`` on the class is answered from ABC's cache
    (0.15-0.25 us). Methods count where the class defines them, as a strategy does, not attributes set on one object.
    """
    return issubclass(type(obj), capability)  # type: ignore[arg-type]  # the callable is a protocol class


@runtime_checkable
class AppliesUpdates(Protocol):
    """The strategy, not each replica's optimizer, applies the gradients (CentralStorage, ParameterServer).

    A custom loop therefore steps through ``strategy.distribute_optimizer(optimizer)``.
    """

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> StrategyOptimizer:
        """Returns an object with the optimizer's interface whose ``step()`` is this strategy's update."""
        ...


@runtime_checkable
class SchedulesSteps(Protocol):
    """``fit``'s steps run where a ``ClusterCoordinator`` schedules them; this process holds copies."""

    def pull_all(self) -> None:
        """Brings this process's copies of the variables up to date (before evaluate, predict, saving)."""
        ...


@runtime_checkable
class NeedsCoordinator(Protocol):
    """``strategy.run`` runs a step only inside a step a ``ClusterCoordinator`` scheduled."""

    def check_can_run(self) -> None:
        """Raises where ``run`` cannot run a step on this process (no coordinator schedules it)."""
        ...


@runtime_checkable
class AgreesThroughStore(Protocol):
    """Replicas agree on flags through the rendezvous store: ``fit``'s one agreement is no collective."""

    def agree_through_store(self, flags: list[bool]) -> list[bool] | None:
        """For each flag, whether some replica holds it; None where no store of this job is at hand."""
        ...


@runtime_checkable
class HoldsRemoteState(Protocol):
    """Training state that lives outside this process (parameter servers) and belongs in a checkpoint."""

    def capture_remote_state(self) -> Any:
        """That state now, as tensors and plain values; call between steps."""
        ...

    def restore_remote_state(self, state: Any) -> None:
        """Puts back what ``capture_remote_state`` returned."""
        ...


@runtime_checkable
class ShardsVariables(Protocol):
    """Each replica holds a shard of every variable and of the optimizer state: each writes its shards."""

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The module's whole state (parameters and buffers) on every replica, on the CPU: a collective."""
        ...

    def load_full_state_dict(self, module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Loads a whole state (as ``full_state_dict`` returns) into the module's shards; every replica calls it."""
        ...


@runtime_checkable
class SupportsNoSync(Protocol):
    """Backward can skip the gradient all-reduce (DDP's ``no_sync``): accumulation syncs once per update."""

    def no_sync(self, module: torch.nn.Module) -> AbstractContextManager[object]:
        """A context in which forward and backward through ``module`` leave gradients local."""
        ...


class StrategyOptimizer:
    """A torch optimizer whose ``step()`` is a strategy's update; everything else is the optimizer's.

    What ``strategy.distribute_optimizer`` returns where the strategy updates the variables itself (central storage,
    parameter servers). Not Horovod's ``hvd.DistributedOptimizer``, which all-reduces the gradients before the step.

    Args:
        optimizer: The torch optimizer over the model's parameters.
        update: ``update(optimizer)`` applies the gradients the strategy's way.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, update: Callable[[torch.optim.Optimizer], None]) -> None:
        self.optimizer = optimizer
        self._update = update

    def __getattr__(self, name: str) -> Any:
        # Everything but step() is the optimizer's: param_groups, state, zero_grad, state_dict, load_state_dict.
        if name == "optimizer":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def step(self, closure: Any = None) -> None:
        if closure is not None:
            raise ValueError("A distributed optimizer's step takes no closure. Received: a closure")
        self._update(self.optimizer)

    def __repr__(self) -> str:
        return f"StrategyOptimizer({type(self.optimizer).__name__})"
