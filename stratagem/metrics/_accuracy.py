"""Accuracy metrics (Keras' definitions): means of a per-example 0/1 value, so sums that add across replicas."""

from __future__ import annotations

import torch

from stratagem.metrics._base import MeanMetricWrapper


def _sparse_labels(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """Integer labels shaped as ``y_pred`` without its class axis (a trailing axis of 1 is dropped)."""
    return y_true.reshape(y_pred.shape[:-1]).long()


def _sparse_categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    return (y_pred.argmax(dim=-1) == _sparse_labels(y_true, y_pred)).float()


def _categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    return (y_pred.argmax(dim=-1) == y_true.argmax(dim=-1)).float()


def _binary_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    return ((y_pred > threshold).float() == y_true.reshape(y_pred.shape).float()).float()


def _accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    return (y_pred == y_true.reshape(y_pred.shape)).float()


def _in_top_k(labels: torch.Tensor, y_pred: torch.Tensor, k: int) -> torch.Tensor:
    # As tf.math.in_top_k: the label's score is at least the k-th largest, so ties at the
    # boundary count as in the top k.
    kth_largest = y_pred.topk(min(k, y_pred.shape[-1]), dim=-1).values[..., -1]
    label_score = y_pred.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return (label_score >= kth_largest).float()


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


class TopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the one-hot label is among the ``k`` top predictions (Keras' ``TopKCategoricalAccuracy``).

    Args:
        k: How many of the highest predictions count.
        name: The ``logs`` key.
    """

    def __init__(self, k: int = 5, name: str = "top_k_categorical_accuracy") -> None:
        super().__init__(lambda t, p: _in_top_k(t.argmax(dim=-1), p, k), name)
        self.k = k


class SparseTopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the integer label is among the ``k`` top predictions (``SparseTopKCategoricalAccuracy``).

    Args:
        k: How many of the highest predictions count.
        name: The ``logs`` key.
    """

    def __init__(self, k: int = 5, name: str = "sparse_top_k_categorical_accuracy") -> None:
        super().__init__(lambda t, p: _in_top_k(_sparse_labels(t, p), p, k), name)
        self.k = k
