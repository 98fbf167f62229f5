"""``ModelFnModel``: a ``Model`` whose steps call an Estimator ``model_fn``, so ``fit``/``evaluate`` drive it.

In TRAIN mode ``model_fn`` runs inside the forward of the module the strategy wrapped (DDP), so its gradients are
synced as ``fit``'s are, with fit's rule: each replica's loss weighs its rows over the step's global batch, and the
gradients are summed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from stratagem._nest import batch_size_of
from stratagem.distribute.capabilities import AppliesUpdates, SchedulesSteps, has
from stratagem.errors import ConfigurationError
from stratagem.estimator.specs import EstimatorSpec, ModeKeys
from stratagem.models import Model
from stratagem.models.data_adapter import unpack


def call_model_fn(model_fn: Callable[..., Any], features: Any, labels: Any, mode: ModeKeys, params: Any,
                  config: Any) -> EstimatorSpec:
    """Calls ``model_fn`` and checks that it returned a spec naming its module."""
    spec = model_fn(features=features, labels=labels, mode=mode, params=params, config=config)
    if not isinstance(spec, EstimatorSpec):
        raise TypeError(f"model_fn must return an EstimatorSpec. Received: {type(spec).__name__}")
    if not isinstance(spec.scaffold, nn.Module):
        raise ValueError(
            "EstimatorSpec.scaffold must be the torch.nn.Module that holds the model's weights: the Estimator "
            "checkpoints, restores and synchronises it (TF found variables in its graph; torch has no graph). "
            f"Return EstimatorSpec(..., scaffold=module). Received: scaffold={type(spec.scaffold).__name__}")
    return spec


class ModelFnModel(Model):
    """Runs ``model_fn`` in ``train_step``/``test_step``/``predict_step``; the module is ``spec.scaffold``."""

    def __init__(self, spec: EstimatorSpec, model_fn: Callable[..., Any], params: Any, config: Any) -> None:
        super().__init__(spec.scaffold, name="model_fn")
        self._model_fn, self._params, self._config = model_fn, params, config
        self._eval_metrics: dict[str, Any] = {}
        # The spec's hooks, read from the call that built the model (TF reads them once, from its graph).
        self.training_hooks = list(spec.training_hooks)
        self.evaluation_hooks = list(spec.evaluation_hooks)

    def compile_for(self, spec: EstimatorSpec) -> None:
        """Binds to the strategy in scope with ``spec.train_op`` (a placeholder SGD outside TRAIN)."""
        strategy = self.distribute_strategy
        if (has(strategy, AppliesUpdates) or has(strategy, SchedulesSteps)):
            raise ConfigurationError(
                f"An Estimator built from a model_fn trains under the all-reduce strategies; {type(strategy).__name__} "
                "applies updates itself. Use MirroredStrategy or MultiWorkerMirroredStrategy, or "
                f"model_to_estimator(stratagem.Model(...)). Received: train_distribute={type(strategy).__name__}")
        optimizer = spec.train_op if spec.train_op is not None else torch.optim.SGD(self.module.parameters(), lr=0.0)
        self.compile(optimizer=optimizer)  # also broadcasts the chief's weights (the strategy's module wrap)

    def _spec(self, data: Any, mode: ModeKeys) -> tuple[EstimatorSpec, Any]:
        features, labels, _ = unpack(data)
        features, labels = self._to_device(features), self._to_device(labels)
        return call_model_fn(self._model_fn, features, labels, mode, self._params, self._config), features

    def train_step(self, data: Any, *, global_batch_size: int | None = None) -> None:
        """One step of ``model_fn`` in TRAIN mode, with fit's gradient rule.

        Each replica's loss (``model_fn``'s batch mean) is weighted by its rows over the step's global batch and the
        strategy sums the gradients in backward (``model_fn`` runs inside the forward of the module ``compile``
        wrapped), so N replicas update as one does on their rows together, also when the last batches differ in
        size.
        """
        step = self._gradient_step
        assert step is not None and self._train_module is not None
        features, labels, _ = unpack(data)
        rows = batch_size_of(features)
        with step.forward():  # gradients cleared, autocast, DDP's no_sync between accumulated updates
            spec = self._train_module(self._to_device(features), self._to_device(labels))
        if spec.loss is None:
            raise ValueError("In TRAIN mode model_fn must return EstimatorSpec(loss=...). Received: loss=None")
        global_rows = self._step_rows(rows)
        step.minimize(spec.loss * (rows / global_rows))
        self._track_loss(spec.loss, rows, global_rows)

    def _step_module(self) -> nn.Module:
        # What the strategy wraps: model_fn's TRAIN call, so a forward through the wrap (DDP) runs model_fn and
        # backward syncs the scaffold's gradients the way fit's do.
        return _ModelFnCall(self.module, self._model_fn, self._params, self._config)

    def _step_rows(self, rows: int) -> int:
        """The step's rows over every replica: an input_fn gives each replica its own batches, whose sizes may differ."""
        strategy = self.distribute_strategy
        if strategy.num_replicas_in_sync == 1:
            return rows
        # NOTE: one small all-reduce per step. Per-replica batches do not say the global batch (the last ones of a
        # pipeline can be short on one replica only), and fit's rule needs it exactly.
        count = torch.tensor(float(rows), dtype=torch.float64, device=strategy.device)
        return int(strategy.reduce("sum", count, axis=None).item())

    def _track_loss(self, loss: torch.Tensor, rows: int, global_rows: int) -> None:
        # The logged loss tracker takes this replica's share of the global-batch loss.
        share = loss.detach() * rows / global_rows
        self._require_compiled().loss_tracker.update_step(share, global_rows, rows)

    def test_step(self, data: Any, *, global_batch_size: int | None = None) -> None:
        spec, _ = self._spec(data, ModeKeys.EVAL)
        if spec.loss is not None:
            rows = batch_size_of(data)
            self._track_loss(spec.loss, rows, global_batch_size or rows * self.distribute_strategy.num_replicas_in_sync)
        for name, metric in (spec.eval_metric_ops or {}).items():
            kept = self._eval_metrics.setdefault(name, metric)
            if kept is not metric:  # a fresh metric per call: add its sums into the first one
                for total, value in zip(kept.variables, metric.variables):
                    total += value.to(total.device)

    def predict_step(self, data: Any) -> Any:
        features = data[0] if isinstance(data, tuple) else data
        spec = call_model_fn(self._model_fn, self._to_device(features), None, ModeKeys.PREDICT, self._params,
                             self._config)
        return spec.predictions

    def reset_metrics(self) -> None:
        super().reset_metrics()
        for metric in self._eval_metrics.values():
            metric.reset_state()
        self._eval_metrics = {}

    def get_metrics_result(self, local: bool = False) -> dict[str, Any]:
        results: dict[str, Any] = dict(super().get_metrics_result(local=local))
        strategy = None if local else self.distribute_strategy
        for name, metric in self._eval_metrics.items():
            value = strategy.metric_result(metric) if strategy is not None else metric.result()
            results[name] = float(value) if value.numel() == 1 else value.tolist()
        return results


class _ModelFnCall(nn.Module):
    """``model_fn`` in TRAIN mode as a module over its scaffold, for the strategy to wrap (DDP)."""

    def __init__(self, scaffold: nn.Module, model_fn: Callable[..., Any], params: Any, config: Any) -> None:
        super().__init__()
        self.scaffold = scaffold
        self._model_fn, self._params, self._config = model_fn, params, config

    def forward(self, features: Any, labels: Any) -> EstimatorSpec:
        spec = call_model_fn(self._model_fn, features, labels, ModeKeys.TRAIN, self._params, self._config)
        if spec.scaffold is not self.scaffold:
            raise ValueError(
                "model_fn must return the same scaffold module at every call: the Estimator trains, checkpoints "
                "and synchronises the module of its first call. Build the module once, outside model_fn. "
                f"Received: a new {type(spec.scaffold).__name__}")
        return spec
