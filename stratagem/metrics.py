"""Keras-named metrics over torch, kept as sums and counts.

Every metric here is a running ``total / count``, so its state can be summed
across replicas with one all-reduce; the model does that reduction before
values reach ``logs`` (``stratagem.models.compile_utils``). Metrics take no
distribution arguments.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "Metric", "Mean", "MeanMetricWrapper", "Accuracy", "SparseCategoricalAccuracy",
    "CategoricalAccuracy", "BinaryAccuracy", "MeanSquaredError", "MeanAbsoluteError", "get",
]


class Metric:
    """A running mean: ``update_state`` adds to ``total`` and ``count``; ``result`` divides.

    Args:
        name: Key of this metric in ``logs`` (``val_`` is prefixed for validation).
    """

    def __init__(self, name: str = "metric") -> None:
        self.name = name
        self.total = torch.zeros((), dtype=torch.float64)
        self.count = torch.zeros((), dtype=torch.float64)

    @property
    def variables(self) -> list[torch.Tensor]:
        """The state tensors; summing them across replicas gives the global state."""
        return [self.total, self.count]

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:
        """Adds a batch: subclasses compute per-example values and pass them to ``_add``."""
        raise TypeError(f"{type(self).__name__} does not define update_state; subclass Metric and implement it")

    def _add(self, values: torch.Tensor, sample_weight: torch.Tensor | None) -> None:
        values = values.detach().flatten(1).mean(dim=1) if values.ndim > 1 else values.detach()
        if self.total.device != values.device:
            self.total, self.count = self.total.to(values.device), self.count.to(values.device)
        if sample_weight is None:
            self.total += values.sum(dtype=torch.float64)
            self.count += values.numel()
        else:
            weight = sample_weight.detach().reshape(values.shape).to(torch.float64)
            self.total += (values.to(torch.float64) * weight).sum()
            self.count += weight.sum()

    def result(self) -> torch.Tensor:
        """The mean so far, on this replica only."""
        return self.result_from(self.variables)

    @staticmethod
    def result_from(variables: list[torch.Tensor]) -> torch.Tensor:
        total, count = variables
        return total / count.clamp_min(1e-12) if float(count) > 0 else torch.zeros((), dtype=torch.float64)

    def reset_state(self) -> None:
        self.total.zero_()
        self.count.zero_()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Mean(Metric):
    """Weighted mean of the values passed to ``update_state(values)`` (``keras.metrics.Mean``)."""

    def __init__(self, name: str = "mean") -> None:
        super().__init__(name)

    def update_state(self, values: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:  # type: ignore[override]
        self._add(values.reshape(-1) if values.ndim == 0 else values, sample_weight)


class MeanMetricWrapper(Metric):
    """Mean of ``fn(y_true, y_pred)`` per example (``keras.metrics.MeanMetricWrapper``)."""

    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], name: str) -> None:
        super().__init__(name)
        self.fn = fn

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:
        with torch.no_grad():
            self._add(self.fn(y_true, y_pred), sample_weight)


def _sparse_categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    return (y_pred.argmax(dim=-1) == y_true.reshape(y_pred.shape[:-1]).long()).float()


def _categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    return (y_pred.argmax(dim=-1) == y_true.argmax(dim=-1)).float()


def _binary_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    return ((y_pred > threshold).float() == y_true.reshape(y_pred.shape).float()).float()


def _accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    return (y_pred == y_true.reshape(y_pred.shape)).float()


class Accuracy(MeanMetricWrapper):
    """How often predictions equal labels exactly (``keras.metrics.Accuracy``)."""

    def __init__(self, name: str = "accuracy") -> None:
        super().__init__(_accuracy, name)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """How often ``argmax(y_pred)`` equals the integer label."""

    def __init__(self, name: str = "sparse_categorical_accuracy") -> None:
        super().__init__(_sparse_categorical_accuracy, name)


class CategoricalAccuracy(MeanMetricWrapper):
    """How often ``argmax(y_pred)`` equals ``argmax`` of the one-hot label."""

    def __init__(self, name: str = "categorical_accuracy") -> None:
        super().__init__(_categorical_accuracy, name)


class BinaryAccuracy(MeanMetricWrapper):
    """How often ``y_pred > threshold`` matches the binary label."""

    def __init__(self, name: str = "binary_accuracy", threshold: float = 0.5) -> None:
        super().__init__(lambda t, p: _binary_accuracy(t, p, threshold), name)


class MeanSquaredError(MeanMetricWrapper):
    """Mean squared error (``keras.metrics.MeanSquaredError``)."""

    def __init__(self, name: str = "mean_squared_error") -> None:
        super().__init__(lambda t, p: (p - t.to(p.dtype).reshape(p.shape)) ** 2, name)


class MeanAbsoluteError(MeanMetricWrapper):
    """Mean absolute error (``keras.metrics.MeanAbsoluteError``)."""

    def __init__(self, name: str = "mean_absolute_error") -> None:
        super().__init__(lambda t, p: (p - t.to(p.dtype).reshape(p.shape)).abs(), name)


_BY_NAME: dict[str, Callable[[], Metric]] = {
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "categorical_accuracy": CategoricalAccuracy,
    "binary_accuracy": BinaryAccuracy,
    "mean_squared_error": MeanSquaredError,
    "mse": lambda: MeanSquaredError(name="mse"),
    "mean_absolute_error": MeanAbsoluteError,
    "mae": lambda: MeanAbsoluteError(name="mae"),
}

# Keras resolves "accuracy"/"acc" by the loss: the same word means argmax
# agreement for categorical losses and thresholding for binary ones.
_ACCURACY_FOR_LOSS = {
    "sparse_categorical_crossentropy": SparseCategoricalAccuracy,
    "categorical_crossentropy": CategoricalAccuracy,
    "binary_crossentropy": BinaryAccuracy,
}


def get(identifier: str | Metric, *, loss_name: str | None = None) -> Metric:
    """Returns a ``Metric`` for a Keras name or a ``Metric``; ``"accuracy"`` follows the loss."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in ("accuracy", "acc"):
            factory = _ACCURACY_FOR_LOSS.get(loss_name or "", Accuracy)
            return factory(name=identifier)  # type: ignore[call-arg]
        if key in _BY_NAME:
            return _BY_NAME[key]()
        raise ValueError(
            f"Unknown metric. Expected 'accuracy' or one of {sorted(_BY_NAME)}, or a stratagem.metrics.Metric. "
            f"Received: metric={identifier!r}"
        )
    if callable(identifier):
        return MeanMetricWrapper(identifier, name=getattr(identifier, "__name__", "metric"))
    raise TypeError(f"metric must be a string or a Metric. Received: metric of type {type(identifier).__name__}")
