"""Keras-named losses over torch; each returns the loss of every example.

Losses take no distribution arguments: the model divides their per-example
values by the global batch size (``stratagem.models.compile_utils``), which
is what keeps N replicas equal to one.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy",
    "MeanSquaredError", "MeanAbsoluteError", "get",
]

_EPSILON = 1e-7


class Loss(abc.ABC):
    """Base class: ``__call__(y_true, y_pred)`` returns per-example losses, shape ``(batch,)``."""

    name = "loss"

    def __call__(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        values = self.call(y_true, y_pred)
        # flatten(1), not reshape(n, -1): a replica's share of a short last batch can be empty.
        return values.flatten(1).mean(dim=1) if values.ndim > 1 else values

    @abc.abstractmethod
    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        """Loss of each example (extra axes are averaged by ``__call__``)."""


class _ProbabilityCheck:
    """Warns once when ``from_logits=False`` receives values that are not probabilities."""

    _warned = False

    def check(self, y_pred: torch.Tensor, loss_name: str) -> None:
        if self._warned:
            return
        self._warned = True
        with torch.no_grad():
            if bool((y_pred < 0).any()) or bool((y_pred > 1).any()):
                warnings.warn(
                    f"{loss_name} received values outside [0, 1] with from_logits=False, so they are not "
                    f"probabilities and the loss is wrong. If the model outputs logits, use "
                    f"{loss_name}(from_logits=True). Received: min={float(y_pred.min()):.3g}, "
                    f"max={float(y_pred.max()):.3g}",
                    stacklevel=4,
                )


class SparseCategoricalCrossentropy(Loss, _ProbabilityCheck):
    """Cross-entropy with integer labels, as ``keras.losses.SparseCategoricalCrossentropy``.

    Args:
        from_logits: True if ``y_pred`` are logits; False (Keras' default) if
            they are probabilities.
    """

    name = "sparse_categorical_crossentropy"

    def __init__(self, from_logits: bool = False) -> None:
        self.from_logits = from_logits

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        # Keras' rule: labels may carry a trailing axis of 1; classes are on the LAST axis
        # (torch puts them on axis 1, hence the movedim for sequence outputs).
        target = y_true.squeeze(-1) if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1 else y_true
        target = target.long()
        logits_first = y_pred.movedim(-1, 1) if y_pred.ndim > 2 else y_pred
        if self.from_logits:
            return F.cross_entropy(logits_first, target, reduction="none")
        self.check(y_pred, "SparseCategoricalCrossentropy")
        probs = y_pred / y_pred.sum(dim=-1, keepdim=True)
        log_probs = torch.log(probs.clamp(_EPSILON, 1 - _EPSILON))
        return F.nll_loss(log_probs.movedim(-1, 1) if log_probs.ndim > 2 else log_probs, target, reduction="none")


class CategoricalCrossentropy(Loss, _ProbabilityCheck):
    """Cross-entropy with one-hot labels, as ``keras.losses.CategoricalCrossentropy``."""

    name = "categorical_crossentropy"

    def __init__(self, from_logits: bool = False) -> None:
        self.from_logits = from_logits

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        if self.from_logits:
            return -(y_true * F.log_softmax(y_pred, dim=-1)).sum(dim=-1)
        self.check(y_pred, "CategoricalCrossentropy")
        probs = y_pred / y_pred.sum(dim=-1, keepdim=True)
        return -(y_true * torch.log(probs.clamp(_EPSILON, 1 - _EPSILON))).sum(dim=-1)


class BinaryCrossentropy(Loss, _ProbabilityCheck):
    """Binary cross-entropy, as ``keras.losses.BinaryCrossentropy``."""

    name = "binary_crossentropy"

    def __init__(self, from_logits: bool = False) -> None:
        self.from_logits = from_logits

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true = y_true.to(y_pred.dtype).reshape(y_pred.shape)
        if self.from_logits:
            return F.binary_cross_entropy_with_logits(y_pred, y_true, reduction="none")
        self.check(y_pred, "BinaryCrossentropy")
        return F.binary_cross_entropy(y_pred.clamp(_EPSILON, 1 - _EPSILON), y_true, reduction="none")


class MeanSquaredError(Loss):
    """Mean of squared errors over the last axis, as ``keras.losses.MeanSquaredError``."""

    name = "mean_squared_error"

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        return (y_pred - y_true.to(y_pred.dtype).reshape(y_pred.shape)) ** 2


class MeanAbsoluteError(Loss):
    """Mean of absolute errors over the last axis, as ``keras.losses.MeanAbsoluteError``."""

    name = "mean_absolute_error"

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        return (y_pred - y_true.to(y_pred.dtype).reshape(y_pred.shape)).abs()


class _FunctionLoss(Loss):
    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", "loss")

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        return self.fn(y_true, y_pred)


_BY_NAME: dict[str, Callable[[], Loss]] = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
}


def get(identifier: str | Loss | Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Loss:
    """Returns a ``Loss`` for a Keras name, a ``Loss``, or a function ``(y_true, y_pred) -> per-example``."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        try:
            return _BY_NAME[identifier.lower()]()
        except KeyError:
            raise ValueError(
                f"Unknown loss. Expected one of {sorted(_BY_NAME)}, a stratagem.losses.Loss or a function. "
                f"Received: loss={identifier!r}"
            ) from None
    if callable(identifier):
        return _FunctionLoss(identifier)
    raise TypeError(f"loss must be a string, a Loss or a callable. Received: loss of type {type(identifier).__name__}")
