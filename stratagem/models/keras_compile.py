"""Keras 3 loss, metric and optimizer objects given to ``Model.compile``, as stratagem's.

A Keras loss's unreduced ``call`` gives each example's loss, which ``compile`` scales by the global batch
(``KerasLoss``); a Keras metric's variables are sums and counts, all-reduced before ``result()`` as TF does
(``KerasMetric``); a Keras optimizer becomes the stratagem optimizer of its name and configuration
(``optimizer_from_keras``; not its state), since strategies step torch optimizers. This module never imports Keras.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from stratagem import losses as losses_lib
from stratagem import metrics as metrics_lib
from stratagem import optimizers as optimizers_lib
from stratagem.models.keras_internals import keras_device, learning_rate_setting, local_result
from stratagem.models.keras_model import check_torch_backend, imported_keras
from stratagem.optimizers import schedules as schedules_lib


class KerasLoss(losses_lib.Loss):
    """A ``keras.losses.Loss`` as a stratagem loss: per-example values from its ``call``."""

    def __init__(self, keras_loss: Any) -> None:
        super().__init__(name=keras_loss.name, reduction=keras_loss.reduction)
        self.keras_loss = keras_loss

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        ops = imported_keras().ops  # type: ignore[union-attr]
        # As keras.losses.Loss.__call__: both sides in the loss's dtype before its call.
        dtype = self.keras_loss.dtype
        with keras_device(y_pred.device):
            return self.keras_loss.call(ops.convert_to_tensor(y_true, dtype=dtype),
                                        ops.convert_to_tensor(y_pred, dtype=dtype))


class KerasMetric(metrics_lib.Metric):
    """A ``keras.metrics.Metric`` as a stratagem metric; its variables are the state summed across replicas."""

    def __init__(self, keras_metric: Any) -> None:
        super().__init__(keras_metric.name)
        self.keras_metric = keras_metric

    @property
    def variables(self) -> list[torch.Tensor]:
        return [variable.value for variable in self.keras_metric.variables]

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:
        with torch.no_grad(), keras_device(y_pred.device):
            for variable in self.keras_metric.variables:
                # Made on Keras's default device (the GPU if any) when the metric was created: keep them with
                # the values they sum.
                if variable.value.device != y_pred.device:
                    variable.value.data = variable.value.data.to(y_pred.device)
            self.keras_metric.update_state(y_true, y_pred, sample_weight=sample_weight)

    def result(self) -> torch.Tensor:
        # The local result: compile_utils has put the replicas' sums in the variables already.
        return torch.as_tensor(local_result(self.keras_metric)).detach()

    def reset_state(self) -> None:
        self.keras_metric.reset_state()


def from_keras(optimizer: Any, loss: Any, metrics: Sequence[Any] | None,
               weighted_metrics: Sequence[Any] | None) -> tuple[Any, Any, list[Any], list[Any]]:
    """``compile``'s arguments with every Keras object replaced by its stratagem counterpart."""
    metrics, weighted_metrics = list(metrics or []), list(weighted_metrics or [])
    keras = imported_keras()
    if keras is None:  # no Keras object can exist
        return optimizer, loss, metrics, weighted_metrics
    if isinstance(optimizer, keras.optimizers.Optimizer):
        check_torch_backend(keras, f"the optimizer {type(optimizer).__name__}")
        optimizer = optimizer_from_keras(optimizer)
    if isinstance(loss, keras.losses.Loss):
        check_torch_backend(keras, f"the loss {type(loss).__name__}")
        loss = KerasLoss(loss)

    def metric(value: Any) -> Any:
        if not isinstance(value, keras.metrics.Metric):
            return value
        check_torch_backend(keras, f"the metric {type(value).__name__}")
        return KerasMetric(value)

    return optimizer, loss, [metric(m) for m in metrics], [metric(m) for m in weighted_metrics]


def optimizer_from_keras(keras_optimizer: Any) -> optimizers_lib.Optimizer:
    """The stratagem optimizer of ``keras_optimizer``'s class, with its hyperparameters and learning rate (schedule).

    Raises:
        ValueError: If stratagem has no optimizer of that name, or the Keras one sets an argument it does not take.
    """
    name = type(keras_optimizer).__name__
    target = getattr(optimizers_lib, name, None)
    if name not in optimizers_lib.__all__ or not isinstance(target, type) or target is optimizers_lib.Optimizer:
        supported = sorted(n for n in optimizers_lib.__all__ if n not in ("Optimizer", "schedules", "get"))
        raise ValueError(
            "stratagem steps Keras optimizers as its own optimizer of the same name (strategies update torch tensors "
            f"centrally or on parameter servers), and has no {name}. Use one of {supported} (keras.optimizers or "
            f"stratagem.optimizers), or a torch.optim optimizer. Received: optimizer={name}")
    config = keras_optimizer.get_config()
    rate = learning_rate_setting(keras_optimizer)  # the schedule object itself; get_config holds it serialized
    keras = imported_keras()
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[union-attr]
        config["learning_rate"] = _mapped(rate, getattr(schedules_lib, type(rate).__name__, None), "schedule")
    else:  # Keras keeps the rate in float32: its shortest repr is the number the user wrote (0.001)
        config["learning_rate"] = float(str(np.float32(config["learning_rate"])))
    return _construct(target, config, defaults=type(keras_optimizer)().get_config(), what=f"optimizer {name}")


def _mapped(keras_object: Any, target: Any, what: str) -> Any:
    """A stratagem object of ``target`` class built from ``keras_object.get_config()``."""
    name = type(keras_object).__name__
    if not isinstance(target, type):
        raise ValueError(f"stratagem has no learning-rate {what} {name}: use ExponentialDecay, "
                         f"PiecewiseConstantDecay or CosineDecay. Received: {name}")
    return _construct(target, keras_object.get_config(), defaults={}, what=f"{what} {name}")


def _construct(target: type, config: dict[str, Any], *, defaults: dict[str, Any], what: str) -> Any:
    """``target(**config)``; a key ``target`` does not take is dropped only at its Keras default."""
    accepted = {p for cls in target.__mro__ if "__init__" in vars(cls)
                for p in inspect.signature(vars(cls)["__init__"]).parameters}
    unsupported = {k: v for k, v in config.items() if k not in accepted and (k not in defaults or defaults[k] != v)}
    if unsupported:
        raise ValueError(
            f"The Keras {what} sets arguments stratagem's {target.__name__} does not implement, so training would "
            f"differ from Keras. Leave them at their defaults, or use another optimizer. Received: {unsupported}")
    return target(**{k: v for k, v in config.items() if k in accepted})
