"""What ``compile`` holds: the loss, its global-batch scaling, and the metrics.

The rule that keeps N replicas equal to one lives here: every replica divides the sum of its per-example losses by
the GLOBAL batch size, and the strategy sums gradients, so the update is the one the whole batch would give on one
device. Metric states are sums (and counts), all-reduced before they are read.
"""

from __future__ import annotations

from typing import Any

import torch

from stratagem import losses as losses_lib
from stratagem import metrics as metrics_lib
from stratagem.distribute.strategy import Strategy, read_summed

# What compile trains on: the sum over the global batch divided by its size ("mean" is Keras' alias).
_COMPILE_REDUCTIONS = ("sum_over_batch_size", "mean")


class CompiledLoss:
    """Per-example loss, then ``sum(weight * loss) / global_batch_size``."""

    def __init__(self, loss: Any) -> None:
        self.loss = losses_lib.get(loss)
        reduction = getattr(self.loss, "reduction", "sum_over_batch_size")
        if reduction not in _COMPILE_REDUCTIONS:
            raise ValueError(
                "compile trains on the loss summed over the global batch and divided by its size (Keras' default "
                "reduction), which is what keeps N replicas equal to one; other reductions are for calling the loss "
                f"yourself. Use reduction='sum_over_batch_size' in compile. Received: reduction={reduction!r}")

    @property
    def name(self) -> str:
        return self.loss.name

    def per_example(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        values = self.loss.per_example(y_true, y_pred)
        if values.ndim != 1 or values.shape[0] != y_pred.shape[0]:
            raise ValueError(
                "A loss must return one value per example. Received: "
                f"loss output shape={tuple(values.shape)}, batch size={y_pred.shape[0]}")
        return values


class _LossTracker(metrics_lib.Mean):
    """Keras 3's logged loss: each step's loss weighted by the step's batch size.

    With sample weights that is ``sum(w * loss) / N`` over the epoch's N examples, the value training minimises (not
    ``/ sum(w)``).
    """

    def update_step(self, loss: torch.Tensor, global_batch_size: int, rows: int) -> None:
        # NOTE: each replica adds its share of the step's loss times the global batch, and its own rows: summed over
        # replicas that is exactly (step loss x batch, batch).
        value = loss.detach().to(torch.float64) * global_batch_size
        if self.total.device != value.device:
            self.total, self.count = self.total.to(value.device), self.count.to(value.device)
        self.total += value
        self.count += rows


def _accuracy_for_shapes(y_true: torch.Tensor, y_pred: torch.Tensor, name: str) -> metrics_lib.MeanMetricWrapper:
    """Keras 3's reading of ``"accuracy"``: binary for one output, sparse for class ids, else categorical."""
    if y_pred.ndim < 2 or y_pred.shape[-1] == 1:  # NOTE: 1-D outputs are one binary output per example
        return metrics_lib.BinaryAccuracy(name=name)
    if y_true.ndim < y_pred.ndim or y_true.shape[-1] == 1:
        return metrics_lib.SparseCategoricalAccuracy(name=name)
    return metrics_lib.CategoricalAccuracy(name=name)


class _AccuracyByShape(metrics_lib.MeanMetricWrapper):
    """``"accuracy"`` in compile: which accuracy is decided by the first batch's shapes.

    Its state is a sum and a count whichever it becomes, so every replica (and a parameter-server chief that never
    sees a batch) holds the same layout.
    """

    def __init__(self, name: str) -> None:
        super().__init__(self._resolved_values, name)
        self.resolved: metrics_lib.MeanMetricWrapper | None = None

    def _resolved_values(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        if self.resolved is None:
            self.resolved = _accuracy_for_shapes(y_true, y_pred, self.name)
        return self.resolved.fn(y_true, y_pred)


def _compiled_metric(identifier: Any) -> metrics_lib.Metric:
    if isinstance(identifier, str) and identifier.lower() in ("accuracy", "acc"):
        return _AccuracyByShape(identifier)
    return metrics_lib.get(identifier)


def _log_keys(metrics: list[metrics_lib.Metric], weighted: list[metrics_lib.Metric]) -> list[str]:
    """Keras 3's keys: repeats get ``_1``, ``_2``; a weighted metric whose name is taken gets ``weighted_``."""
    keys: list[str] = []
    seen: dict[str, int] = {}

    def unique(name: str) -> str:
        if name not in seen:
            seen[name] = 1
            return name
        seen[name] += 1
        return f"{name}_{seen[name] - 1}"

    keys += [unique(m.name) for m in metrics]
    keys += [unique(m.name) if m.name not in seen else unique(f"weighted_{m.name}") for m in weighted]
    return keys


class CompiledMetrics:
    """The loss tracker plus the compiled metrics, reduced across replicas on read.

    ``metrics`` ignore sample weights and ``weighted_metrics`` use them, as in Keras.
    """

    def __init__(self, metrics: list[Any] | None, weighted_metrics: list[Any] | None = None) -> None:
        self.loss_tracker = _LossTracker(name="loss")
        self.unweighted = [_compiled_metric(m) for m in (metrics or [])]
        self.weighted = [_compiled_metric(m) for m in (weighted_metrics or [])]
        self.metrics = [*self.unweighted, *self.weighted]
        self._keys = ["loss", *_log_keys(self.unweighted, self.weighted)]

    @property
    def all(self) -> list[metrics_lib.Metric]:
        return [self.loss_tracker, *self.metrics]

    def update(self, y_true: Any, y_pred: torch.Tensor, sample_weight: torch.Tensor | None,
               loss: torch.Tensor | None = None, global_batch_size: int | None = None) -> None:
        """Adds a step: ``loss`` is this replica's share of the step's loss (what ``compute_loss`` returns)."""
        if loss is not None:
            rows = y_pred.shape[0]
            self.loss_tracker.update_step(loss, global_batch_size or rows, rows)
        if y_true is None:
            return
        for metric in self.unweighted:
            metric.update_state(y_true, y_pred)
        for metric in self.weighted:
            metric.update_state(y_true, y_pred, sample_weight)

    def reset(self) -> None:
        for metric in self.all:
            metric.reset_state()

    def results(self, strategy: Strategy | None = None) -> dict[str, Any]:
        """Each metric's ``result()``: over every replica with ``strategy`` (a collective), else this replica's.

        All states of all metrics travel in one all-reduce (they are sums); each metric then computes its own
        ``result()`` from the summed states, so a metric that overrides ``result`` or keeps other states logs what
        it defines. Every replica must call this at the same point when it is a collective.
        """
        return read_summed(strategy, [v for metric in self.all for v in metric.variables], self._read)

    def _read(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, metric in zip(self._keys, self.all):
            if not any(bool(v.any()) for v in metric.variables):
                continue  # nothing seen (no loss compiled, no labels): Keras logs no value either
            value = metric.result()
            # A metric at several thresholds (Precision(thresholds=[...])) logs a list, as Keras logs an array.
            out[key] = float(value) if value.numel() == 1 else value.tolist()
        return out
