"""``ModelFnModel``: a ``Model`` whose steps call an Estimator ``model_fn``, so ``fit``/``evaluate`` drive it.

The ``model_fn`` runs the module itself (not through DDP's wrapper), so
gradients are averaged here, in one all-reduce per step, after backward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from stratagem.distribute.capabilities import AppliesUpdates, SchedulesSteps
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
        if isinstance(strategy, (AppliesUpdates, SchedulesSteps)):
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

    def train_step(self, data: Any) -> None:
        assert self.optimizer is not None
        self.optimizer.zero_grad()
        spec, _ = self._spec(data, ModeKeys.TRAIN)
        if spec.loss is None:
            raise ValueError("In TRAIN mode model_fn must return EstimatorSpec(loss=...). Received: loss=None")
        spec.loss.backward()
        self._average_gradients()
        self._updater.step()
        self._track_loss(spec.loss, data)

    def _average_gradients(self) -> None:
        strategy = self.distribute_strategy
        if strategy.num_replicas_in_sync == 1:
            return
        # NOTE: model_fn calls the module directly, so DDP's hooks (armed only by a forward
        # through its wrapper) stay idle: the average is taken here, flat, in one collective.
        # Mean, not sum: model_fn's loss is its batch mean, as TF's optimizers rescale it.
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.module.parameters()
                 if p.requires_grad]
        if not grads:
            return
        flat = strategy.reduce("mean", torch.cat([g.reshape(-1) for g in grads]), axis=None)
        offset = 0
        for param in (p for p in self.module.parameters() if p.requires_grad):
            size = param.numel()
            param.grad = flat[offset:offset + size].view_as(param).clone()
            offset += size

    def _track_loss(self, loss: torch.Tensor, data: Any) -> None:
        rows = int(torch.as_tensor(_first_tensor(data)).shape[0])
        global_batch = self._global_batch_size(rows)
        # The logged loss tracker takes this replica's share of the global-batch loss.
        share = loss.detach() * rows / global_batch
        self._require_compiled().loss_tracker.update_step(share, global_batch, rows)

    def test_step(self, data: Any) -> None:
        spec, _ = self._spec(data, ModeKeys.EVAL)
        if spec.loss is not None:
            self._track_loss(spec.loss, data)
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


def _first_tensor(data: Any) -> Any:
    while isinstance(data, (tuple, list)):
        data = data[0]
    if isinstance(data, dict):
        return _first_tensor(next(iter(data.values())))
    return data
