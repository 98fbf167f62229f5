"""Keras-named losses over torch, with Keras 3's ``reduction``.

A loss called on its own (``loss_fn(y_true, y_pred, sample_weight)``) returns the reduced value, as in Keras.
``compile`` instead takes each example's loss (``Loss.per_example``) and the model divides their sum by the global
batch size (``stratagem.models.compile_utils``), which is what keeps N replicas equal to one. Every loss also takes
``reduction`` and ``name`` (see ``Loss``), and no distribution arguments.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from stratagem._keras_names import factory_for

__all__ = [
    "Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy",
    "MeanSquaredError", "MeanAbsoluteError", "Huber", "KLDivergence", "REDUCTIONS", "get",
]

_EPSILON = 1e-7
REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight", "none", None)


def _standardize_reduction(reduction: str | None) -> str | None:
    if reduction not in REDUCTIONS:
        fix = " Keras 2's 'auto' is 'sum_over_batch_size' in Keras 3." if reduction == "auto" else ""
        raise ValueError(f"Invalid reduction. Expected one of {list(REDUCTIONS)}.{fix} Received: reduction={reduction!r}")
    return reduction


class Loss(abc.ABC):
    """Base class of losses, as ``keras.losses.Loss``: subclasses implement ``call``.

    ``__call__(y_true, y_pred, sample_weight=None)`` weights ``call``'s values and reduces them:
    ``"sum_over_batch_size"`` (default) and ``"mean"`` divide the sum by the number of values, ``"sum"`` returns the
    sum, ``"mean_with_sample_weight"`` divides by the sum of the weights, and ``"none"`` or ``None`` return the
    values.

    Args:
        name: The loss's name (its ``logs`` key in multi-loss setups).
        reduction: One of ``REDUCTIONS``.
    """

    name = "loss"
    reduction: str | None = "sum_over_batch_size"

    def __init__(self, name: str | None = None, reduction: str | None = "sum_over_batch_size") -> None:
        if name is not None:
            self.name = name
        self.reduction = _standardize_reduction(reduction)

    def __call__(self, y_true: torch.Tensor, y_pred: torch.Tensor,
                 sample_weight: torch.Tensor | None = None) -> torch.Tensor:
        values = self.call(torch.as_tensor(y_true), torch.as_tensor(y_pred))
        return _reduce(values, sample_weight, self.reduction)

    def per_example(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        """Each example's loss, shape ``(batch,)``: ``call``'s values with extra axes averaged."""
        if y_true is None:  # fit(x) or a dataset of x alone: raised here, not as torch's AttributeError
            raise ValueError(
                f"The loss {self.name!r} compares labels with the model's outputs, but the batch has no labels "
                "(y is None). Pass y to fit/evaluate, or batches of (x, y); a model that trains without labels "
                "overrides compute_loss or train_step. Received: y=None")
        values = self.call(y_true, y_pred)
        # flatten(1), not reshape(n, -1): a replica's share of a short last batch can be empty.
        return values.flatten(1).mean(dim=1) if values.ndim > 1 else values

    @abc.abstractmethod
    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        """Unreduced loss values: one per example (and per timestep for sequences)."""


def _same_rank(values: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keras' rule: where ranks differ by one and the longer ends in an axis of 1, align them."""
    if values.ndim == weight.ndim + 1 and values.shape[-1] == 1:
        return (values, weight.unsqueeze(-1)) if weight.ndim == 1 else (values.squeeze(-1), weight)
    if weight.ndim == values.ndim + 1 and weight.shape[-1] == 1:
        return (values.unsqueeze(-1), weight) if values.ndim == 1 else (values, weight.squeeze(-1))
    return values, weight


def _reduce(values: torch.Tensor, sample_weight: torch.Tensor | None, reduction: str | None) -> torch.Tensor:
    weight = None
    if sample_weight is not None:
        weight = torch.as_tensor(sample_weight, device=values.device).to(values.dtype)
        values, weight = _same_rank(values, weight)
        values = values * weight
    if reduction in (None, "none") or values.ndim == 0 or tuple(values.shape) == (0,):
        return values
    total = values.sum()
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and weight is not None:
        divisor = weight.sum()
        return total / divisor if float(divisor) != 0 else torch.zeros_like(total)
    return total / values.numel()


def _mean_last_axis(values: torch.Tensor) -> torch.Tensor:
    # Keras averages over the last axis; a 1-D prediction is one value per example here.
    return values.mean(dim=-1) if values.ndim > 1 else values


def _aligned(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """``y_true`` as ``y_pred``'s dtype and shape; (batch,) labels pair with (batch, 1) outputs."""
    if y_true.numel() != y_pred.numel():
        raise ValueError(
            "The loss compares each label with the model's output at the same place, but they hold different "
            f"numbers of values: labels {tuple(y_true.shape)}, outputs {tuple(y_pred.shape)}. Make the model's "
            "last layer output one value per label value (e.g. Dense(labels.shape[-1])), or fix the labels. "
            f"Received: y_true.shape={tuple(y_true.shape)}, y_pred.shape={tuple(y_pred.shape)}")
    return y_true.to(y_pred.dtype).reshape(y_pred.shape)


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
                    f"{loss_name} received values outside [0, 1] with from_logits=False, so they are not probabilities "
                    f"and the loss is wrong. If the model outputs logits, use {loss_name}(from_logits=True). Received: "
                    f"min={float(y_pred.min()):.3g}, max={float(y_pred.max()):.3g}",
                    stacklevel=4,
                )


def _check_label_smoothing(label_smoothing: float) -> float:
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1]. Received: label_smoothing={label_smoothing}")
    return float(label_smoothing)


class SparseCategoricalCrossentropy(Loss, _ProbabilityCheck):
    """Cross-entropy with integer labels, as ``keras.losses.SparseCategoricalCrossentropy``.

    Args:
        from_logits: True if ``y_pred`` are logits; False (Keras' default) if they are probabilities.

    Raises:
        ValueError: If the labels are one-hot (shaped as ``y_pred``).
    """

    name = "sparse_categorical_crossentropy"

    def __init__(self, from_logits: bool = False, reduction: str | None = "sum_over_batch_size",
                 name: str = "sparse_categorical_crossentropy") -> None:
        super().__init__(name, reduction)
        self.from_logits = from_logits

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        if y_true.ndim == y_pred.ndim and y_true.shape[-1] != 1:
            raise ValueError(
                "SparseCategoricalCrossentropy takes one integer class id per example, but the labels have the shape "
                "of the predictions, as one-hot labels do. Use CategoricalCrossentropy for one-hot labels, or pass "
                f"y_true.argmax(-1). Received: y_true.shape={tuple(y_true.shape)}, y_pred.shape={tuple(y_pred.shape)}")
        # Keras' rule: labels may carry a trailing axis of 1; classes are on the LAST axis (torch puts them on axis 1,
        # hence the movedim for sequence outputs).
        target = (y_true.squeeze(-1) if y_true.ndim == y_pred.ndim else y_true).long()
        logits_first = y_pred.movedim(-1, 1) if y_pred.ndim > 2 else y_pred
        try:
            if self.from_logits:
                return F.cross_entropy(logits_first, target, reduction="none")
            self.check(y_pred, "SparseCategoricalCrossentropy")
            probs = y_pred / y_pred.sum(dim=-1, keepdim=True)
            log_probs = torch.log(probs.clamp(_EPSILON, 1 - _EPSILON))
            return F.nll_loss(log_probs.movedim(-1, 1) if log_probs.ndim > 2 else log_probs, target, reduction="none")
        except (IndexError, RuntimeError) as err:
            # NOTE: checked only when torch refuses (a label out of range on CPU), so a good step pays nothing.
            classes = y_pred.shape[-1]
            if target.numel() == 0 or (0 <= int(target.min()) and int(target.max()) < classes):
                raise
            raise ValueError(
                f"SparseCategoricalCrossentropy takes class ids from 0 to {classes - 1} (the model outputs "
                f"{classes} classes), but the labels run from {int(target.min())} to {int(target.max())}. Make "
                f"the last layer output one value per class (e.g. Dense({int(target.max()) + 1}) for ids from 0), "
                f"or map the labels to 0..{classes - 1}. Received: label range=[{int(target.min())}, "
                f"{int(target.max())}], y_pred.shape={tuple(y_pred.shape)}") from err


class CategoricalCrossentropy(Loss, _ProbabilityCheck):
    """Cross-entropy with one-hot labels, as ``keras.losses.CategoricalCrossentropy``.

    Args:
        from_logits: True if ``y_pred`` are logits.
        label_smoothing: In ``[0, 1]``; labels become ``y * (1 - s) + s / num_classes``.
        axis: The class axis.

    Raises:
        ValueError: If the labels are class ids (not shaped as ``y_pred``).
    """

    name = "categorical_crossentropy"

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: str | None = "sum_over_batch_size", name: str = "categorical_crossentropy") -> None:
        super().__init__(name, reduction)
        self.from_logits, self.axis = from_logits, axis
        self.label_smoothing = _check_label_smoothing(label_smoothing)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        if y_true.shape != y_pred.shape:
            raise ValueError(
                "CategoricalCrossentropy takes one-hot labels shaped as the predictions, but the labels look like "
                "class ids. Use SparseCategoricalCrossentropy for integer labels, or one-hot encode them. "
                f"Received: y_true.shape={tuple(y_true.shape)}, y_pred.shape={tuple(y_pred.shape)}")
        y_true, y_pred = y_true.to(y_pred.dtype).movedim(self.axis, -1), y_pred.movedim(self.axis, -1)
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + self.label_smoothing / y_pred.shape[-1]
        if self.from_logits:
            return -(y_true * F.log_softmax(y_pred, dim=-1)).sum(dim=-1)
        self.check(y_pred, "CategoricalCrossentropy")
        probs = y_pred / y_pred.sum(dim=-1, keepdim=True)
        return -(y_true * torch.log(probs.clamp(_EPSILON, 1 - _EPSILON))).sum(dim=-1)


class BinaryCrossentropy(Loss, _ProbabilityCheck):
    """Binary cross-entropy averaged over the last axis, as ``keras.losses.BinaryCrossentropy``.

    Args:
        from_logits: True if ``y_pred`` are logits.
        label_smoothing: In ``[0, 1]``; labels become ``y * (1 - s) + s / 2``.
        axis: The axis averaged over.
    """

    name = "binary_crossentropy"

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: str | None = "sum_over_batch_size", name: str = "binary_crossentropy") -> None:
        super().__init__(name, reduction)
        self.from_logits, self.axis = from_logits, axis
        self.label_smoothing = _check_label_smoothing(label_smoothing)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true = _aligned(y_true, y_pred)
        if y_pred.ndim > 1:
            y_true, y_pred = y_true.movedim(self.axis, -1), y_pred.movedim(self.axis, -1)
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        if self.from_logits:
            return _mean_last_axis(F.binary_cross_entropy_with_logits(y_pred, y_true, reduction="none"))
        self.check(y_pred, "BinaryCrossentropy")
        return _mean_last_axis(F.binary_cross_entropy(y_pred.clamp(_EPSILON, 1 - _EPSILON), y_true, reduction="none"))


class _ReductionFirst(Loss):
    """Keras' signature for losses without options: ``(reduction, name)``."""

    def __init__(self, reduction: str | None = "sum_over_batch_size", name: str | None = None) -> None:
        super().__init__(name, reduction)


class MeanSquaredError(_ReductionFirst):
    """Mean of squared errors over the last axis, as ``keras.losses.MeanSquaredError``."""

    name = "mean_squared_error"

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        return _mean_last_axis((y_pred - _aligned(y_true, y_pred)) ** 2)


class MeanAbsoluteError(_ReductionFirst):
    """Mean of absolute errors over the last axis, as ``keras.losses.MeanAbsoluteError``."""

    name = "mean_absolute_error"

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        return _mean_last_axis((y_pred - _aligned(y_true, y_pred)).abs())


class Huber(Loss):
    """Huber loss averaged over the last axis, as ``keras.losses.Huber``.

    Each error ``e`` costs ``e**2 / 2`` where ``|e| <= delta`` and ``delta * |e| - delta**2 / 2`` beyond.

    Args:
        delta: Where the loss turns from quadratic to linear.
    """

    name = "huber_loss"

    def __init__(self, delta: float = 1.0, reduction: str | None = "sum_over_batch_size",
                 name: str = "huber_loss") -> None:
        super().__init__(name, reduction)
        self.delta = float(delta)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        error = (y_pred - _aligned(y_true, y_pred)).abs()
        quadratic = 0.5 * error**2
        linear = self.delta * error - 0.5 * self.delta**2
        return _mean_last_axis(torch.where(error <= self.delta, quadratic, linear))


class KLDivergence(_ReductionFirst):
    """Kullback-Leibler divergence ``sum(y_true * log(y_true / y_pred))`` over the last axis.

    As ``keras.losses.KLDivergence``, both are clipped to ``[1e-7, 1]`` first.
    """

    name = "kl_divergence"

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true = _aligned(y_true, y_pred).clamp(_EPSILON, 1.0)
        y_pred = y_pred.clamp(_EPSILON, 1.0)
        values = y_true * torch.log(y_true / y_pred)
        return values.sum(dim=-1) if values.ndim > 1 else values


class _FunctionLoss(Loss):
    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__(getattr(fn, "__name__", "loss"))
        self.fn = fn

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
    "huber": Huber,
    "huber_loss": Huber,
    "kl_divergence": KLDivergence,
    "kld": KLDivergence,
    "kullback_leibler_divergence": KLDivergence,
}


def get(identifier: str | Loss | Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Loss:
    """Returns a ``Loss`` for a Keras name, a ``Loss``, or a function ``(y_true, y_pred) -> per-example``."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        return factory_for(identifier, _BY_NAME, kind="loss", example="MeanSquaredError",
                           alternatives="a stratagem.losses.Loss or a function")()
    if callable(identifier):
        return _FunctionLoss(identifier)
    raise TypeError(f"loss must be a string, a Loss or a callable. Received: loss of type {type(identifier).__name__}")
