"""The Keras-named optimizers (``keras.optimizers.SGD``, ``Adam``, ...), with Keras 3's defaults and rules.

Each class holds its Keras arguments and builds the torch optimizer of its rule (``rules``, ``fused_adam``). Every
one also takes ``weight_decay``, ``clipnorm``, ``clipvalue``, ``global_clipnorm`` and ``name`` (see ``Optimizer``),
and a ``LearningRateSchedule`` as ``learning_rate``.
"""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import override

from stratagem.optimizers.fused_adam import KerasAdam
from stratagem.optimizers.optimizer import Optimizer
from stratagem.optimizers.rules import (KerasAdadelta, KerasAdagrad, KerasAdamax, KerasLion, KerasNadam, KerasRMSprop,
                                        KerasSGD)
from stratagem.optimizers.schedules import LearningRateSchedule

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Lion"]

Rate = float | LearningRateSchedule


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum (``keras.optimizers.SGD``).

    ``m = momentum * m - learning_rate * g; w += m`` (nesterov: ``w += momentum * m - learning_rate * g``): past
    steps keep the rate they were taken with when the rate changes.

    Example:
        >>> optimizer = SGD(learning_rate=0.1, momentum=0.9, nesterov=True)
    """

    def __init__(self, learning_rate: Rate = 0.01, momentum: float = 0.0, nesterov: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"`momentum` must be a float between [0, 1], as in Keras. Received: momentum={momentum}")
        self.momentum, self.nesterov = momentum, nesterov

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return KerasSGD(params, momentum=self.momentum, nesterov=self.nesterov, **self._options())


class Adam(Optimizer):
    """Adam (``keras.optimizers.Adam``; Keras defaults, epsilon 1e-7 added to the uncorrected ``sqrt(v)``).

    Example:
        >>> optimizer = Adam(learning_rate=1e-3, amsgrad=True)
    """

    def __init__(self, learning_rate: Rate = 0.001, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon, self.amsgrad = beta_1, beta_2, epsilon, amsgrad

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        # Fused kernels exist for CPU and CUDA; elsewhere torch's default implementation.
        fused = True if device.type in ("cpu", "cuda") else None
        return KerasAdam(params, betas=(self.beta_1, self.beta_2), epsilon=self.epsilon, amsgrad=self.amsgrad,
                         fused=fused, **self._options())


class AdamW(Adam):
    """Adam with decoupled weight decay (``keras.optimizers.AdamW``; weight_decay 0.004).

    Example:
        >>> optimizer = AdamW(learning_rate=1e-3, weight_decay=0.01)
    """

    def __init__(self, learning_rate: Rate = 0.001, weight_decay: float = 0.004, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-7, amsgrad: bool = False, **kwargs: Any) -> None:
        if weight_decay is None:
            raise ValueError("AdamW needs a float weight_decay (Keras raises too); use Adam for no decay. "
                             "Received: weight_decay=None")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay=weight_decay, **kwargs)


class RMSprop(Optimizer):
    """RMSprop (``keras.optimizers.RMSprop``): ``w -= lr * g / sqrt(v + epsilon)``; optional momentum, centered.

    Example:
        >>> optimizer = RMSprop(learning_rate=1e-3, centered=True)
    """

    def __init__(self, learning_rate: Rate = 0.001, rho: float = 0.9, momentum: float = 0.0, epsilon: float = 1e-7,
                 centered: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.rho, self.momentum, self.epsilon, self.centered = rho, momentum, epsilon, centered

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return KerasRMSprop(params, rho=self.rho, momentum=self.momentum, epsilon=self.epsilon, centered=self.centered,
                            **self._options())


class Adagrad(Optimizer):
    """Adagrad (``keras.optimizers.Adagrad``): ``w -= lr * g / sqrt(accumulator + epsilon)``.

    Example:
        >>> optimizer = Adagrad(learning_rate=0.01)
    """

    def __init__(self, learning_rate: Rate = 0.001, initial_accumulator_value: float = 0.1, epsilon: float = 1e-7,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.initial_accumulator_value, self.epsilon = initial_accumulator_value, epsilon

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return KerasAdagrad(params, initial_accumulator_value=self.initial_accumulator_value, epsilon=self.epsilon,
                            **self._options())


class Adadelta(Optimizer):
    """Adadelta (``keras.optimizers.Adadelta``; Keras defaults: learning_rate 0.001, rho 0.95).

    Example:
        >>> optimizer = Adadelta(learning_rate=1.0)
    """

    def __init__(self, learning_rate: Rate = 0.001, rho: float = 0.95, epsilon: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.rho, self.epsilon = rho, epsilon

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return KerasAdadelta(params, rho=self.rho, epsilon=self.epsilon, **self._options())


class _Moments(Optimizer):
    """Holds ``beta_1``, ``beta_2`` and ``epsilon`` with Keras' defaults (Adamax and Nadam)."""

    def __init__(self, learning_rate: Rate = 0.001, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

    _rule: type[KerasAdamax] | type[KerasNadam]

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return self._rule(params, beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon, **self._options())


class Adamax(_Moments):
    """Adamax, Adam with the infinity norm (``keras.optimizers.Adamax``).

    Example:
        >>> optimizer = Adamax(learning_rate=2e-3)
    """

    _rule = KerasAdamax


class Nadam(_Moments):
    """Nadam, Adam with Nesterov momentum (``keras.optimizers.Nadam``).

    Example:
        >>> optimizer = Nadam(learning_rate=2e-3)
    """

    _rule = KerasNadam


class Lion(Optimizer):
    """Lion, the sign of an interpolated momentum (``keras.optimizers.Lion``).

    Example:
        >>> optimizer = Lion(learning_rate=1e-4)
    """

    def __init__(self, learning_rate: Rate = 0.001, beta_1: float = 0.9, beta_2: float = 0.99, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        if not 0.0 < beta_1 <= 1.0:
            raise ValueError("Argument `beta_1` must be in the (0, 1] range, otherwise Lion degenerates to SignSGD "
                             f"(as Keras checks). Received: beta_1={beta_1}")
        self.beta_1, self.beta_2 = beta_1, beta_2

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return KerasLion(params, beta_1=self.beta_1, beta_2=self.beta_2, **self._options())
