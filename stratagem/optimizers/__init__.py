"""Keras-named optimizers (``keras.optimizers``) and learning-rate schedules (``optimizers.schedules``), over torch.

Modules: ``optimizer`` (the base and torch adapter), ``algorithms`` (the Keras-named classes), ``rules`` and
``fused_adam`` (torch optimizers with Keras 3's update rules), ``schedules``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from stratagem.optimizers import schedules
from stratagem.optimizers.algorithms import SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, Lion, Nadam, RMSprop
from stratagem.optimizers.optimizer import Optimizer, TorchOptimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Lion",
           "schedules", "get"]

_BY_NAME: dict[str, Callable[[], Optimizer]] = {
    "sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad, "adadelta": Adadelta,
    "adamax": Adamax, "nadam": Nadam, "lion": Lion,
}


def get(identifier: str | Optimizer | torch.optim.Optimizer) -> Optimizer:
    """Returns an ``Optimizer`` for a Keras name, a stratagem ``Optimizer`` or a torch optimizer.

    Example:
        >>> type(get("rmsprop")).__name__
        'RMSprop'
    """
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, torch.optim.Optimizer):
        return TorchOptimizer(identifier)
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()
    raise ValueError(
        f"Unknown optimizer. Expected one of {sorted(_BY_NAME)}, a stratagem.optimizers.Optimizer or a "
        f"torch.optim.Optimizer. Received: optimizer={identifier!r}")
