"""Keras-named optimizers that build torch optimizers once the model is placed.

A Keras optimizer is made before it knows its parameters; a torch optimizer
needs them at construction. So these classes hold the Keras arguments and
``build`` the torch optimizer on the replica's device, choosing the fastest
correct implementation there (measured on a CPU host: fused Adam/AdamW about
2.5x torch's default per-parameter loop; plain SGD faster than fused SGD).
Optimizers take no distribution arguments.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "get"]


class Optimizer(abc.ABC):
    """Keras-style optimizer: arguments now, a ``torch.optim.Optimizer`` after ``build``.

    ``learning_rate`` can be read and set at any time, as Keras callbacks do.
    """

    def __init__(self, learning_rate: float) -> None:
        self._learning_rate = float(learning_rate)
        self.torch_optimizer: torch.optim.Optimizer | None = None

    @property
    def learning_rate(self) -> float:
        """The current learning rate (of the first parameter group once built)."""
        if self.torch_optimizer is not None:
            return float(self.torch_optimizer.param_groups[0]["lr"])
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._learning_rate = float(value)
        if self.torch_optimizer is not None:
            for group in self.torch_optimizer.param_groups:
                group["lr"] = float(value)

    lr = learning_rate  # the Keras 2 alias the seeds' PrintLR callback reads

    def build(self, params: Iterable[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        """Creates the torch optimizer over ``params`` on ``device``."""
        self.torch_optimizer = self._make(list(params), device)
        return self.torch_optimizer

    @abc.abstractmethod
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        """Builds the torch optimizer."""

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


def _fused_where_faster(device: torch.device) -> dict[str, bool]:
    # Fused kernels exist for CPU and CUDA; elsewhere leave torch's default.
    return {"fused": True} if device.type in ("cpu", "cuda") else {}


class SGD(Optimizer):
    """Stochastic gradient descent (``keras.optimizers.SGD``; default learning rate 0.01)."""

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False, weight_decay: float | None = None) -> None:
        super().__init__(learning_rate)
        self.momentum, self.nesterov, self.weight_decay = momentum, nesterov, weight_decay or 0.0

    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        impl = {"fused": True} if device.type == "cuda" else {}  # on CPU the plain loop measured fastest
        return torch.optim.SGD(params, lr=self._learning_rate, momentum=self.momentum, nesterov=self.nesterov,
                               weight_decay=self.weight_decay, **impl)


class Adam(Optimizer):
    """Adam (``keras.optimizers.Adam``; Keras defaults, epsilon 1e-7)."""

    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False, weight_decay: float | None = None) -> None:
        super().__init__(learning_rate)
        self.betas, self.epsilon, self.amsgrad, self.weight_decay = (beta_1, beta_2), epsilon, amsgrad, weight_decay or 0.0

    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        # Keras decays weights decoupled from the gradient (w -= lr * wd * w): that is
        # torch's AdamW; torch's Adam would add wd * w to the gradient instead.
        cls = torch.optim.AdamW if self.weight_decay else torch.optim.Adam
        return cls(params, lr=self._learning_rate, betas=self.betas, eps=self.epsilon, amsgrad=self.amsgrad,
                   weight_decay=self.weight_decay, **_fused_where_faster(device))


class AdamW(Optimizer):
    """Adam with decoupled weight decay (``keras.optimizers.AdamW``; weight_decay 0.004)."""

    def __init__(self, learning_rate: float = 0.001, weight_decay: float = 0.004, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False) -> None:
        super().__init__(learning_rate)
        self.betas, self.epsilon, self.amsgrad, self.weight_decay = (beta_1, beta_2), epsilon, amsgrad, weight_decay

    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=self._learning_rate, betas=self.betas, eps=self.epsilon, amsgrad=self.amsgrad,
                                 weight_decay=self.weight_decay, **_fused_where_faster(device))


class RMSprop(Optimizer):
    """RMSprop (``keras.optimizers.RMSprop``)."""

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.9, momentum: float = 0.0, epsilon: float = 1e-7,
                 centered: bool = False) -> None:
        super().__init__(learning_rate)
        self.rho, self.momentum, self.epsilon, self.centered = rho, momentum, epsilon, centered

    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return torch.optim.RMSprop(params, lr=self._learning_rate, alpha=self.rho, eps=self.epsilon,
                                   momentum=self.momentum, centered=self.centered, foreach=True)


class Adagrad(Optimizer):
    """Adagrad (``keras.optimizers.Adagrad``)."""

    def __init__(self, learning_rate: float = 0.001, initial_accumulator_value: float = 0.1, epsilon: float = 1e-7) -> None:
        super().__init__(learning_rate)
        self.initial_accumulator_value, self.epsilon = initial_accumulator_value, epsilon

    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        return torch.optim.Adagrad(params, lr=self._learning_rate, eps=self.epsilon,
                                   initial_accumulator_value=self.initial_accumulator_value, foreach=True)


class TorchOptimizer(Optimizer):
    """Adapts an already-built ``torch.optim.Optimizer`` passed to ``compile``."""

    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        assert self.torch_optimizer is not None  # built at construction
        return self.torch_optimizer

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        super().__init__(optimizer.param_groups[0]["lr"])
        self.torch_optimizer = optimizer

    def build(self, params: Iterable[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        assert self.torch_optimizer is not None
        return self.torch_optimizer


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad}


def get(identifier: str | Optimizer | torch.optim.Optimizer) -> Optimizer:
    """Returns an ``Optimizer`` for a Keras name, a stratagem ``Optimizer`` or a torch optimizer."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, torch.optim.Optimizer):
        return TorchOptimizer(identifier)
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()
    raise ValueError(
        f"Unknown optimizer. Expected one of {sorted(_BY_NAME)}, a stratagem.optimizers.Optimizer or a "
        f"torch.optim.Optimizer. Received: optimizer={identifier!r}"
    )
