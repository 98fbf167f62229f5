"""Value types of the strategy API: ``ReduceOp``, ``PerReplica`` and ``ValueContext``.

A replica is a process, so a per-replica value is this process's tensor; ``PerReplica`` lets tf.distribute code that
wraps such values read the same.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch

if TYPE_CHECKING:  # strategy.py imports this module
    from stratagem.distribute.strategy import Strategy


class ReduceOp(str, enum.Enum):
    """How values from every replica are combined (``tf.distribute.ReduceOp``).

    A ``str`` enum, so ``"sum"`` works wherever ``ReduceOp.SUM`` does.
    """

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"

    @classmethod
    def parse(cls, value: ReduceOp | str) -> ReduceOp:
        """Returns the member for ``value``, accepting any case of its name."""
        return parse_enum(cls, value, "reduce op")

    def to_torch(self) -> Any:
        """The ``torch.distributed.ReduceOp`` that implements this op (MEAN sums; the caller divides)."""
        import torch.distributed as dist

        return getattr(dist.ReduceOp, "SUM" if self is ReduceOp.MEAN else self.name)


@dataclass(frozen=True)
class PerReplica:
    """This replica's value of a quantity that differs between replicas.

    ``strategy.reduce`` and ``strategy.gather`` accept it in place of a tensor.
    """

    value: torch.Tensor

    @property
    def values(self) -> tuple[torch.Tensor, ...]:
        """The values held by this process: one, since a replica is a process."""
        return (self.value,)


@dataclass(frozen=True)
class ValueContext:
    """What ``experimental_distribute_values_from_function`` tells its function (TF's ``ValueContext``)."""

    replica_id_in_sync_group: int = 0
    num_replicas_in_sync: int = 1


E = TypeVar("E", bound=enum.Enum)


def parse_enum(cls: type[E], value: E | str, what: str) -> E:
    """The member of the str enum ``cls`` for ``value``, in any case; an unknown ``what`` raises, listing them."""
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).lower())
    except ValueError:
        valid, name = ", ".join(repr(m.value) for m in cls), what.replace(" ", "_")
        raise ValueError(f"Unknown {what}. Expected one of {valid}. Received: {name}={value!r}") from None


def unwrap(value: torch.Tensor | PerReplica | float | int) -> torch.Tensor:
    """Returns the tensor inside ``value``; numbers become 0-d float tensors."""
    if isinstance(value, PerReplica):
        return value.value
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (int, float)):
        return torch.tensor(float(value))
    raise TypeError(
        f"Expected a torch.Tensor, a PerReplica or a number. Received: value of type {type(value).__name__}")


class ReplicaContext:
    """What code inside ``strategy.run`` knows about its replica (``tf.distribute.ReplicaContext``).

    ``all_reduce`` is a collective: every replica calls it at the same point. There is no ``merge_call``: a replica
    is a process, so there is no cross-replica code to merge into.

    Args:
        strategy: The strategy whose ``run`` is calling.
    """

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    @property
    def num_replicas_in_sync(self) -> int:
        """Number of replicas that take part in every step."""
        return int(self.strategy.num_replicas_in_sync)

    @property
    def replica_id_in_sync_group(self) -> int:
        """Index of this replica, in ``[0, num_replicas_in_sync)``."""
        return int(self.strategy.replica_id_in_sync_group)

    def all_reduce(self, reduce_op: ReduceOp | str, value: Any) -> Any:
        """``reduce_op`` of ``value`` (a tensor or a nested structure of them) over every replica, on every replica."""
        from stratagem._nest import map_structure

        return map_structure(lambda tensor: self.strategy.reduce(reduce_op, tensor, axis=None), value)

    def __repr__(self) -> str:
        return f"ReplicaContext(replica {self.replica_id_in_sync_group} of {self.num_replicas_in_sync})"
