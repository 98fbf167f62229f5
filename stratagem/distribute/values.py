"""Value types of the strategy API: ``ReduceOp`` and ``PerReplica``.

A replica is a process, so a "per-replica value" is simply this process's
tensor; ``PerReplica`` exists so code written for tf.distribute, which wraps
such values, reads the same. Reduction itself lives on the strategy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch


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
        if isinstance(value, ReduceOp):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            valid = ", ".join(repr(m.value) for m in cls)
            raise ValueError(
                f"Unknown reduce op. Expected one of {valid}. Received: reduce_op={value!r}"
            ) from None

    def to_torch(self) -> Any:
        """The ``torch.distributed.ReduceOp`` that implements this op (MEAN sums; the caller divides)."""
        import torch.distributed as dist

        return {
            ReduceOp.SUM: dist.ReduceOp.SUM,
            ReduceOp.MEAN: dist.ReduceOp.SUM,
            ReduceOp.MAX: dist.ReduceOp.MAX,
            ReduceOp.MIN: dist.ReduceOp.MIN,
        }[self]


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


def unwrap(value: torch.Tensor | PerReplica | float | int) -> torch.Tensor:
    """Returns the tensor inside ``value``; numbers become 0-d float tensors."""
    if isinstance(value, PerReplica):
        return value.value
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (int, float)):
        return torch.tensor(float(value))
    raise TypeError(
        f"Expected a torch.Tensor, a PerReplica or a number. Received: value of type {type(value).__name__}"
    )
