"""What ``compile`` holds: the loss, its global-batch scaling, and the metrics.

The rule that keeps N replicas equal to one lives here: every replica divides
the sum of its per-example losses by the GLOBAL batch size, and the strategy
sums gradients, so the update is the one the whole batch would give on one
device. Metric states are sums and counts, all-reduced before they are read.
"""

from __future__ import annotations

from typing import Any

import torch

from stratagem import losses as losses_lib
from stratagem import metrics as metrics_lib
from stratagem.distribute.strategy import Strategy
from stratagem.distribute.values import ReduceOp


class CompiledLoss:
    """Per-example loss, then ``sum(weight * loss) / global_batch_size``."""

    def __init__(self, loss: Any) -> None:
        self.loss = losses_lib.get(loss)

    @property
    def name(self) -> str:
        return self.loss.name

    def per_example(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        values = self.loss(y_true, y_pred)
        if values.ndim != 1 or values.shape[0] != y_pred.shape[0]:
            raise ValueError(
                "A loss must return one value per example. Received: "
                f"loss output shape={tuple(values.shape)}, batch size={y_pred.shape[0]}"
            )
        return values

    @staticmethod
    def scale(per_example: torch.Tensor, sample_weight: torch.Tensor | None, global_batch_size: int) -> torch.Tensor:
        weighted = per_example if sample_weight is None else per_example * sample_weight.reshape(per_example.shape)
        # NOTE: divide by the global batch, not this replica's share: gradients
        # are summed across replicas (see collectives.wrap_ddp).
        return weighted.sum() / global_batch_size


class CompiledMetrics:
    """The loss tracker plus the compiled metrics, reduced across replicas on read."""

    def __init__(self, metrics: list[Any] | None, *, loss_name: str | None) -> None:
        self.loss_tracker = metrics_lib.Mean(name="loss")
        self.metrics = [metrics_lib.get(m, loss_name=loss_name) for m in (metrics or [])]

    @property
    def all(self) -> list[metrics_lib.Metric]:
        return [self.loss_tracker, *self.metrics]

    def update(self, y_true: Any, y_pred: torch.Tensor, sample_weight: torch.Tensor | None, per_example_loss: torch.Tensor | None) -> None:
        if per_example_loss is not None:
            self.loss_tracker.update_state(per_example_loss.detach(), sample_weight)
        if y_true is None:
            return
        for metric in self.metrics:
            metric.update_state(y_true, y_pred, sample_weight)

    def reset(self) -> None:
        for metric in self.all:
            metric.reset_state()

    def results(self, strategy: Strategy | None = None) -> dict[str, float]:
        """Each metric's ``result()``: over every replica with ``strategy`` (a collective), else this replica's.

        All states of all metrics travel in one all-reduce (they are sums); each
        metric then computes its own ``result()`` from the summed states, so a
        metric that overrides ``result`` or keeps other states logs what it defines.
        Every replica must call this at the same point when it is a collective.
        """
        states = [v for metric in self.all for v in metric.variables]
        if strategy is None or strategy.num_replicas_in_sync == 1 or not states:
            return self._read()
        local = [v.detach().clone() for v in states]
        packed = torch.cat([v.detach().to(torch.float64).reshape(-1).cpu() for v in states])
        packed = strategy.reduce(ReduceOp.SUM, packed.to(strategy.device), axis=None).cpu()
        offset = 0
        for variable in states:  # the global sums, for result() to read
            variable.copy_(packed[offset : offset + variable.numel()].reshape(variable.shape))
            offset += variable.numel()
        try:
            return self._read()
        finally:
            for variable, value in zip(states, local):
                variable.copy_(value)

    def _read(self) -> dict[str, float]:
        out = {}
        for metric in self.all:
            count = getattr(metric, "count", None)
            if isinstance(count, torch.Tensor) and float(count) == 0:
                continue  # nothing seen (no loss compiled, no labels): Keras logs no value either
            out[metric.name] = float(metric.result())
        return out
