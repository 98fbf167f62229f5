"""The Keras-facing optimizer base: arguments now, a torch optimizer once the model is placed.

A Keras optimizer is made before it knows its parameters, a torch one needs them, so an ``Optimizer`` holds the
Keras arguments (learning rate or schedule, weight decay, clipping) and ``build`` makes the torch optimizer on the
replica's device. ``TorchOptimizer`` adapts a torch optimizer given to ``compile``. No distribution arguments.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from stratagem.optimizers.schedules import LearningRateSchedule

__all__ = ["Optimizer", "LearningRate", "TorchOptimizer"]


class LearningRate(float):
    """A learning rate as read from an optimizer: a float with Keras' ``.numpy()``.

    Example:
        >>> LearningRate(0.001).numpy()
        np.float32(0.001)
    """

    def numpy(self) -> np.float32:
        # Keras 3 keeps the rate in a float32 variable; its .numpy() is that scalar.
        return np.float32(self)


class Optimizer(abc.ABC):
    """Keras-style optimizer: arguments now, a ``torch.optim.Optimizer`` after ``build``.

    ``learning_rate`` (alias ``lr``) can be read and set at any time, as Keras callbacks do; it reads as a float
    with ``.numpy()``.

    Args:
        learning_rate: A float, or a ``schedules.LearningRateSchedule`` giving the rate of each step.
        weight_decay: If set, each step first decays the weights: ``w -= w * weight_decay * lr``.
        clipnorm: If set, each gradient is scaled to norm at most this.
        clipvalue: If set, each gradient element is clipped to ``[-clipvalue, clipvalue]``.
        global_clipnorm: If set, all gradients are scaled together to global norm at most this.
        name: The optimizer's name (Keras' ``name``).
        use_ema: Not implemented: only False is accepted (``ema_momentum`` and ``ema_overwrite_frequency`` go with
            it).
        loss_scale_factor: Not implemented: only None is accepted.
        gradient_accumulation_steps: ``None``, or an int k >= 2: ``Model.fit`` then updates the weights every k
            steps with the average of their gradients, communicating only on that step (DDP ``no_sync``), so k steps
            equal one step on k times the batch. NOTE: Keras 3 also counts the steps in between in ``iterations`` (a
            schedule and Adam's bias correction advance k times per update); here the optimizer counts updates.
    """

    def __init__(self, learning_rate: float | LearningRateSchedule, *, weight_decay: float | None = None,
                 clipnorm: float | None = None, clipvalue: float | None = None, global_clipnorm: float | None = None,
                 name: str | None = None, use_ema: bool = False, ema_momentum: float = 0.99,
                 ema_overwrite_frequency: int | None = None, loss_scale_factor: float | None = None,
                 gradient_accumulation_steps: int | None = None) -> None:
        unimplemented = {"use_ema": use_ema, "loss_scale_factor": loss_scale_factor}
        if any(unimplemented.values()):
            received = ", ".join(f"{key}={value!r}" for key, value in unimplemented.items() if value)
            raise ValueError(
                "stratagem optimizers do not implement Keras' weight averaging (use_ema) or a fixed loss scale "
                "(loss_scale_factor; stratagem.mixed_precision.LossScaleOptimizer scales dynamically); leave them at "
                "their defaults (ema_momentum and ema_overwrite_frequency only apply with use_ema). "
                f"Received: {received}")
        if gradient_accumulation_steps is not None and (
                not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 2):
            raise ValueError("`gradient_accumulation_steps` must be an integer >= 2, as in Keras (or None). "
                             f"Received: gradient_accumulation_steps={gradient_accumulation_steps!r}")
        self.gradient_accumulation_steps = gradient_accumulation_steps
        if sum(value is not None for value in (clipnorm, clipvalue, global_clipnorm)) > 1:
            raise ValueError(
                "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set, as in Keras. "
                f"Received: clipnorm={clipnorm}, clipvalue={clipvalue}, global_clipnorm={global_clipnorm}")
        self._schedule = learning_rate if isinstance(learning_rate, LearningRateSchedule) else None
        self._learning_rate = float(self._schedule(0) if self._schedule is not None else learning_rate)  # type: ignore[arg-type]
        self.weight_decay, self.clipnorm, self.clipvalue, self.global_clipnorm = weight_decay, clipnorm, clipvalue, global_clipnorm
        self.name = name or type(self).__name__.lower()
        self.torch_optimizer: torch.optim.Optimizer | None = None

    @property
    def learning_rate(self) -> LearningRate:
        """The current learning rate (of the first parameter group once built)."""
        if self.torch_optimizer is not None:
            return LearningRate(self.torch_optimizer.param_groups[0]["lr"])
        return LearningRate(self._learning_rate)

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        if self._schedule is not None:
            raise TypeError(
                "This optimizer was created with a LearningRateSchedule as its learning_rate, so its learning rate "
                "is not settable (as in Keras). Create the optimizer with a float learning_rate to set it. "
                f"Received: learning_rate={value!r}")
        self._learning_rate = float(value)
        if self.torch_optimizer is not None:
            for group in self.torch_optimizer.param_groups:
                group["lr"] = float(value)

    lr = learning_rate  # the Keras 2 alias the seeds' PrintLR callback reads

    @property
    def iterations(self) -> torch.Tensor:
        """The number of updates applied so far (Keras' ``iterations``), as an int64 scalar; read-only here."""
        if self.torch_optimizer is None:
            return torch.tensor(0, dtype=torch.int64)
        group = self.torch_optimizer.param_groups[0]
        if "iterations" not in group:
            raise AttributeError(f"{type(self.torch_optimizer).__name__} is a torch optimizer passed to compile, "
                                 "which does not count its updates: use a Keras optimizer (tf.keras.optimizers) to "
                                 "read optimizer.iterations")
        return torch.tensor(int(group["iterations"]), dtype=torch.int64)

    def build(self, params: Iterable[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        """Creates the torch optimizer over ``params`` on ``device``."""
        self.torch_optimizer = self._make(list(params), device)
        return self.torch_optimizer

    @abc.abstractmethod
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        """Builds the torch optimizer."""

    def _options(self) -> dict[str, Any]:
        """The arguments every Keras rule takes: rate or schedule, weight decay, clipping."""
        return {"lr": self._learning_rate, "schedule": self._schedule, "weight_decay": self.weight_decay or 0.0,
                "clipnorm": self.clipnorm, "clipvalue": self.clipvalue, "global_clipnorm": self.global_clipnorm}

    def zero_grad(self) -> None:
        self._built().zero_grad(set_to_none=True)

    def step(self) -> None:
        self._built().step()

    def state_dict(self) -> dict[str, Any]:
        return self._built().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._built().load_state_dict(state)

    def _built(self) -> torch.optim.Optimizer:
        if self.torch_optimizer is None:
            raise RuntimeError(f"{type(self).__name__} is not built yet: call model.compile() and fit() first")
        return self.torch_optimizer


class TorchOptimizer(Optimizer):
    """Adapts an already-built ``torch.optim.Optimizer`` passed to ``compile``."""

    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        assert self.torch_optimizer is not None  # built at construction
        return self.torch_optimizer

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        super().__init__(optimizer.param_groups[0]["lr"])
        self.torch_optimizer = optimizer
