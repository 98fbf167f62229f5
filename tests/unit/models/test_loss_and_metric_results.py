"""``compute_loss`` (Keras 3's contract) and logged metric values (each metric's own ``result()``).

A fake strategy with several replicas and no process group stands in for a
real one: its all-reduce returns what N identical replicas would sum to.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import stratagem
from stratagem.distribute.input_context import InputContext
from stratagem.distribute.strategy import Strategy
from stratagem.metrics import Metric
from stratagem.models.compile_utils import CompiledMetrics


class _IdenticalReplicas(Strategy):
    """``num_replicas`` replicas that all hold this process's values; all-reduce SUM multiplies by N."""

    def __init__(self, num_replicas: int) -> None:
        self._requested = num_replicas
        super().__init__()

    def _setup(self) -> None:
        self._num_replicas = self._requested

    def _wrap_module(self, module: nn.Module) -> nn.Module:
        return module

    def _all_reduce(self, tensor: torch.Tensor, op: object) -> torch.Tensor:
        return tensor * self._num_replicas if str(op).lower().endswith("sum") else tensor

    def _input_context(self) -> InputContext:
        return InputContext()


class RootMeanSquaredError(Metric):
    """A user metric in Keras' style: sums in update_state, the root in result()."""

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:
        self._add((y_pred - y_true) ** 2, sample_weight)

    def result(self) -> torch.Tensor:
        return torch.sqrt(super().result())


class SumMaxCount(Metric):
    """Three states, to check that the metrics after it stay aligned."""

    def __init__(self) -> None:
        super().__init__("three_states")
        self.extra = torch.zeros((), dtype=torch.float64)

    @property
    def variables(self) -> list[torch.Tensor]:
        return [self.total, self.count, self.extra]

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:
        self._add(y_pred, sample_weight)
        self.extra += 100.0

    def result(self) -> torch.Tensor:
        return self.total / self.count + self.extra


def _update(metrics: CompiledMetrics) -> None:
    y_true, y_pred = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 2.0, 5.0])
    # The step's loss as compute_loss returns it: per-example losses 1, 1, 4 over a batch of 3.
    metrics.update(y_true, y_pred, None, torch.tensor(6.0 / 3), global_batch_size=3)


def test_overridden_result_is_what_gets_logged() -> None:
    metrics = CompiledMetrics([RootMeanSquaredError(name="rmse"), "mae"])
    _update(metrics)
    logs = metrics.results()
    assert logs["rmse"] == pytest.approx(math.sqrt((1 + 0 + 4) / 3))  # not the mean square, 5/3
    assert logs["mae"] == pytest.approx(1.0)
    assert logs["loss"] == pytest.approx(2.0)


def test_metric_with_three_states_keeps_the_others_aligned_across_replicas() -> None:
    metrics = CompiledMetrics([SumMaxCount(), "mae"])
    _update(metrics)
    logs = metrics.results(_IdenticalReplicas(2))
    assert logs["three_states"] == pytest.approx(3.0 + 200.0)  # mean 3; extra: 100 on each of 2 replicas
    assert logs["mae"] == pytest.approx(1.0)
    assert logs["loss"] == pytest.approx(2.0)
    assert float(metrics.metrics[0].extra) == 100.0, "reading global logs must leave the local state as it was"


def test_compute_loss_returns_the_loss_scaled_by_every_replicas_batch_outside_fit() -> None:
    strategy = _IdenticalReplicas(4)
    with strategy.scope():
        model = stratagem.Model(nn.Linear(2, 1))
        model.compile(optimizer="sgd", loss="mse")
    y, y_pred = torch.zeros(3, 1), torch.ones(3, 1)
    loss = model.compute_loss(None, y, y_pred)
    assert isinstance(loss, torch.Tensor) and loss.ndim == 0  # Keras 3 returns the loss, not a tuple
    # Outside fit: this replica's 3 examples of a global batch of 3 * 4, as strategy.run(train_step) needs.
    assert float(loss) == pytest.approx(3.0 / 12)
    # Inside fit's step the batch says how many examples the step has, and the step passes it on.
    assert float(model.compute_loss(None, y, y_pred, global_batch_size=5)) == pytest.approx(3.0 / 5)
