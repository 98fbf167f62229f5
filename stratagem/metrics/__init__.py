"""Keras-named metrics over torch (states that sum across replicas: ``_base``), and ``get`` by Keras name."""

from __future__ import annotations

from collections.abc import Callable

from stratagem._keras_names import factory_for
from stratagem.metrics._accuracy import (
    Accuracy, BinaryAccuracy, CategoricalAccuracy, SparseCategoricalAccuracy, SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy,
)
from stratagem.metrics._base import Mean, MeanAbsoluteError, MeanMetricWrapper, MeanSquaredError, Metric
from stratagem.metrics._confusion import AUC, Precision, Recall

__all__ = [
    "Metric", "Mean", "MeanMetricWrapper", "Accuracy", "SparseCategoricalAccuracy", "CategoricalAccuracy",
    "BinaryAccuracy", "TopKCategoricalAccuracy", "SparseTopKCategoricalAccuracy", "MeanSquaredError",
    "MeanAbsoluteError", "Precision", "Recall", "AUC", "get",
]

# The metric a Keras name stands for; it logs under the name as given ("mse" logs "mse").
_BY_NAME: dict[str, Callable[..., Metric]] = {
    "accuracy": Accuracy,
    "acc": Accuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "categorical_accuracy": CategoricalAccuracy,
    "binary_accuracy": BinaryAccuracy,
    "top_k_categorical_accuracy": TopKCategoricalAccuracy,
    "sparse_top_k_categorical_accuracy": SparseTopKCategoricalAccuracy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
    "precision": Precision,
    "recall": Recall,
    "auc": AUC,
}


def get(identifier: str | Metric | Callable[..., object]) -> Metric:
    """Returns a ``Metric`` for a Keras name, a ``Metric``, or ``fn(y_true, y_pred)`` (a mean of its values).

    ``"accuracy"`` here is exact-match ``Accuracy``, as ``keras.metrics.get``; ``compile`` picks binary, categorical
    or sparse accuracy from the shapes.
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        return factory_for(identifier, _BY_NAME, kind="metric", example="Precision",
                           alternatives="a stratagem.metrics.Metric or a function")(name=identifier)
    if callable(identifier):
        return MeanMetricWrapper(identifier, name=getattr(identifier, "__name__", "metric"))  # type: ignore[arg-type]
    raise TypeError(f"metric must be a string or a Metric. Received: metric of type {type(identifier).__name__}")
