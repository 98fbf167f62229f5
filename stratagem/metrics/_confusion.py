"""Metrics over confusion counts at thresholds: ``Precision``, ``Recall`` and ``AUC`` (Keras' definitions).

Their state is weighted counts of true/false positives/negatives per threshold, sums over examples that add up
across replicas; ``result()`` is computed from the summed counts, so distributed values are exact. A prediction is
positive at threshold ``t`` when ``y_pred > t``, in float32 as in Keras.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from stratagem.metrics._base import Metric

_EPSILON = 1e-7
_NEG_INF = -1e10  # Keras' stand-in for "not among the top k"
_COUNTS = ("true_positives", "false_positives", "true_negatives", "false_negatives")


def _evenly_spaced(thresholds: Sequence[float]) -> bool:
    """True for thresholds ``0, 1/(n-1), ..., 1`` (Keras then counts by buckets, in O(examples + thresholds))."""
    values = np.asarray(thresholds, dtype=np.float64)
    return len(values) >= 3 and bool(np.allclose(values, np.arange(len(values)) / (len(values) - 1), atol=_EPSILON))


def _broadcast(sample_weight: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Weights as float64 in the shape of ``scores``: a weight per example applies to each of its outputs."""
    weights = torch.as_tensor(sample_weight).detach().to(scores.device, torch.float64)
    if weights.ndim > scores.ndim:
        return weights.reshape(scores.shape)
    while weights.ndim < scores.ndim:
        weights = weights.unsqueeze(-1)
    return weights.expand(scores.shape)


def _divide_no_nan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(b != 0, a / torch.where(b != 0, b, torch.ones_like(b)), torch.zeros_like(a))


class _ConfusionCounts(Metric):
    """Weighted confusion counts at each of ``thresholds``; subclasses define ``result``."""

    # The counts (_COUNTS), set in __init__ through setattr.
    true_positives: torch.Tensor
    false_positives: torch.Tensor
    true_negatives: torch.Tensor
    false_negatives: torch.Tensor

    def __init__(self, name: str, thresholds: Sequence[float], *, top_k: int | None = None,
                 class_id: int | None = None, even_buckets: bool = False, num_labels: int | None = None) -> None:
        super().__init__(name)
        self.thresholds = [float(t) for t in thresholds]
        self.top_k, self.class_id = top_k, class_id
        # Keras counts evenly spaced thresholds by bucket (with predictions clipped to [0, 1]).
        self._even_buckets = even_buckets
        # With num_labels, counts are kept per label (last axis): shape (thresholds, labels).
        self.num_labels = num_labels
        shape = (len(self.thresholds),) if num_labels is None else (len(self.thresholds), num_labels)
        for count in _COUNTS:
            setattr(self, count, torch.zeros(shape, dtype=torch.float64))

    @property
    def variables(self) -> list[torch.Tensor]:
        return [getattr(self, count) for count in _COUNTS]

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:
        with torch.no_grad():
            labels, scores, weights = self._prepare(torch.as_tensor(y_true), torch.as_tensor(y_pred), sample_weight)
            positive = self._positive_counts(scores, weights * labels)
            negative = self._positive_counts(scores, weights * (1 - labels))
            deltas: tuple[torch.Tensor, ...] = (positive, negative, (weights * (1 - labels)).sum(0) - negative, (weights * labels).sum(0) - positive)
            if self.num_labels is None:  # one flattened label
                deltas = tuple(delta.squeeze(-1) for delta in deltas)
            if self.true_positives.device != scores.device:
                for count in _COUNTS:
                    setattr(self, count, getattr(self, count).to(scores.device))
            for variable, delta in zip(self.variables, deltas):
                variable += delta

    def _prepare(self, y_true: torch.Tensor, y_pred: torch.Tensor,
                 sample_weight: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Labels (0/1), scores (float32) and weights (float64) as (examples, labels), after top_k and class_id."""
        scores = y_pred.detach().float()
        if y_true.numel() != scores.numel():
            raise ValueError(f"{type(self).__name__} needs one label per prediction. Received: "
                             f"y_true.shape={tuple(y_true.shape)}, y_pred.shape={tuple(y_pred.shape)}")
        labels = (y_true.detach().reshape(scores.shape) != 0).to(torch.float64)
        weights = torch.ones_like(labels) if sample_weight is None else _broadcast(sample_weight, scores)
        if self.top_k is not None:
            # A stable sort, as TF's top_k: among equal scores the lower index is kept.
            top = scores.sort(dim=-1, descending=True, stable=True).indices[..., : self.top_k]
            keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, True)
            scores = torch.where(keep, scores, torch.full_like(scores, _NEG_INF))
        if self.class_id is not None:
            labels, scores, weights = labels[..., self.class_id], scores[..., self.class_id], weights[..., self.class_id]
        if self.num_labels is not None and (scores.ndim == 0 or scores.shape[-1] != self.num_labels):
            raise ValueError(f"{type(self).__name__} was built for {self.num_labels} labels on the last axis. "
                             f"Received: y_pred.shape={tuple(y_pred.shape)}")
        width = self.num_labels or 1
        return labels.reshape(-1, width), scores.reshape(-1, width), weights.reshape(-1, width)

    def _positive_counts(self, scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Sum of ``weights`` where ``scores > threshold``, per threshold and label: shape (thresholds, labels)."""
        num_thresholds, num_labels = len(self.thresholds), scores.shape[-1]
        if self._even_buckets:
            # Bucket b holds scores in (t_b, t_b+1]: positive at every threshold up to b.
            buckets = torch.ceil(scores.clamp(0.0, 1.0) * (num_thresholds - 1)).long() - 1
            if self.thresholds[0] < 0:  # an endpoint below 0: a score of 0 is above it
                buckets = buckets.clamp_min(0)
            kept = buckets >= 0
            slots = buckets * num_labels + torch.arange(num_labels, device=scores.device)
            per_bucket = torch.zeros(num_thresholds * num_labels, dtype=torch.float64, device=scores.device)
            per_bucket.index_add_(0, slots[kept], weights[kept])
            return per_bucket.reshape(num_thresholds, num_labels).flip(0).cumsum(0).flip(0)
        thresholds = torch.tensor(self.thresholds, dtype=torch.float32, device=scores.device)
        above = scores.unsqueeze(-1) > thresholds
        return (above.to(torch.float64) * weights.unsqueeze(-1)).sum(dim=0).T

    def _single(self, values: torch.Tensor) -> torch.Tensor:
        return values[0] if len(self.thresholds) == 1 else values


def _thresholds_for(thresholds: float | Sequence[float] | None, default: float) -> list[float]:
    values = [default] if thresholds is None else [thresholds] if isinstance(thresholds, (int, float)) else list(thresholds)
    bad = [t for t in values if t is None or not (0 <= t <= 1)] if thresholds is not None else []
    if bad:
        raise ValueError(f"Thresholds must be in [0, 1]. Received: thresholds={thresholds!r}")
    return values


class _ThresholdMetric(_ConfusionCounts):
    """Precision or recall: one value per threshold (0.5 by default, "in the top k" with ``top_k``)."""

    default_name = "metric"

    def __init__(self, thresholds: float | Sequence[float] | None = None, top_k: int | None = None,
                 class_id: int | None = None, name: str | None = None) -> None:
        values = _thresholds_for(thresholds, 0.5 if top_k is None else _NEG_INF)
        super().__init__(name or self.default_name, values, top_k=top_k, class_id=class_id,
                         even_buckets=_evenly_spaced(values))


class Precision(_ThresholdMetric):
    """``TP / (TP + FP)``: the share of predicted positives that are positive (``keras.metrics.Precision``).

    Args:
        thresholds: A float or list of floats in ``[0, 1]`` (default 0.5, or "in the top k" with ``top_k``); a list
            gives one value per threshold.
        top_k: Only the ``top_k`` highest predictions of each example count as positive.
        class_id: Only this class (last axis index) counts.
        name: The ``logs`` key.

    Example:
        >>> m = Precision()
        >>> m.update_state(torch.tensor([0, 1, 1, 1]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
        >>> round(float(m.result()), 4)
        0.6667
    """

    default_name = "precision"

    def result(self) -> torch.Tensor:
        return self._single(_divide_no_nan(self.true_positives, self.true_positives + self.false_positives))


class Recall(_ThresholdMetric):
    """``TP / (TP + FN)``: the share of positives predicted positive (``keras.metrics.Recall``).

    Takes the arguments of ``Precision`` (``thresholds``, ``top_k``, ``class_id``, ``name``).
    """

    default_name = "recall"

    def result(self) -> torch.Tensor:
        return self._single(_divide_no_nan(self.true_positives, self.true_positives + self.false_negatives))


class AUC(_ConfusionCounts):
    """Area under the ROC or precision-recall curve, approximated at thresholds (``keras.metrics.AUC``).

    As Keras: thresholds ``-1e-7, 1/(n-1), ..., (n-2)/(n-1), 1 + 1e-7`` for ``num_thresholds=n``; ROC by the
    trapezoid rule over (FPR, TPR), PR by Davis and Goadrich's interpolation; ``"minoring"``/``"majoring"`` take the
    lower/upper rectangle instead.

    Args:
        num_thresholds: How many thresholds (more than 1).
        curve: ``"ROC"`` or ``"PR"``.
        summation_method: ``"interpolation"``, ``"minoring"`` or ``"majoring"``.
        name: The ``logs`` key.
        thresholds: Thresholds in ``[0, 1]`` to use instead (the endpoints are added).
        multi_label: True: one AUC per label (last axis), then their mean; False: every label-prediction pair is one
            data point.
        num_labels: The number of labels; needed with ``multi_label=True``.
        label_weights: With ``multi_label``, the weights of the labels' mean; without, each label's weight in the
            flattened counts.
        from_logits: Apply a sigmoid to ``y_pred`` first.

    Raises:
        ValueError: For an unknown ``curve``/``summation_method``, or ``multi_label=True`` without ``num_labels``.
    """

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC", summation_method: str = "interpolation",
                 name: str = "auc", thresholds: Sequence[float] | None = None, multi_label: bool = False,
                 num_labels: int | None = None, label_weights: Sequence[float] | None = None,
                 from_logits: bool = False) -> None:
        self.curve, self.summation_method = curve.upper(), summation_method.lower()
        if self.curve not in ("ROC", "PR") or self.summation_method not in ("interpolation", "minoring", "majoring"):
            raise ValueError("AUC takes curve='ROC' or 'PR' and summation_method='interpolation', 'minoring' or "
                             f"'majoring'. Received: curve={curve!r}, summation_method={summation_method!r}")
        if multi_label != (num_labels is not None):
            # NOTE: Keras may wait for the first batch to learn num_labels; here every replica (and a parameter-server
            # chief that sees no batch) must hold the same state shape from the start.
            raise ValueError("AUC takes num_labels exactly when multi_label=True (stratagem needs the number of "
                             "labels up front, so every replica holds the same state). Pass both or neither. "
                             f"Received: multi_label={multi_label}, num_labels={num_labels}")
        if thresholds is None:
            if num_thresholds <= 1:
                raise ValueError(f"num_thresholds must be an integer > 1. Received: num_thresholds={num_thresholds}")
            inner = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
            even = True
        else:
            inner = sorted(_thresholds_for(list(thresholds), 0.5))
            even = _evenly_spaced([0.0, *inner, 1.0])
        super().__init__(name, [-_EPSILON, *inner, 1.0 + _EPSILON], even_buckets=even, num_labels=num_labels)
        self.multi_label = multi_label
        self.num_thresholds = len(self.thresholds)
        self.label_weights = None if label_weights is None else torch.as_tensor(label_weights, dtype=torch.float64)
        self.from_logits = from_logits

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor, sample_weight: torch.Tensor | None = None) -> None:
        y_pred = torch.as_tensor(y_pred)
        if self.from_logits:
            y_pred = torch.sigmoid(y_pred)
        if self.label_weights is not None and not self.multi_label:  # Keras folds them into the example weights
            weights = torch.ones(()) if sample_weight is None else sample_weight
            sample_weight = _broadcast(weights, y_pred) * self.label_weights.to(y_pred.device)
        super().update_state(y_true, y_pred, sample_weight)

    def result(self) -> torch.Tensor:
        tp, fp, tn, fn = self.variables
        areas = self._areas(tp, fp, tn, fn)  # one per label with multi_label
        if not self.multi_label:
            return areas
        if self.label_weights is None:
            return areas.mean()
        label_weights = self.label_weights.to(areas.device)
        return _divide_no_nan((areas * label_weights).sum(), label_weights.sum())

    def _areas(self, tp: torch.Tensor, fp: torch.Tensor, tn: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        if self.curve == "PR" and self.summation_method == "interpolation":
            return _interpolated_pr_auc(tp, fp, fn)
        recall = _divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _divide_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, _divide_no_nan(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / 2
        elif self.summation_method == "minoring":
            heights = torch.minimum(y[:-1], y[1:])
        else:
            heights = torch.maximum(y[:-1], y[1:])
        return ((x[:-1] - x[1:]) * heights).sum(dim=0)


def _interpolated_pr_auc(tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
    """PR-AUC with true and false positives linear between thresholds (Davis and Goadrich, 2006)."""
    predicted = tp + fp
    d_tp = tp[:-1] - tp[1:]
    d_predicted = predicted[:-1] - predicted[1:]
    slope = _divide_no_nan(d_tp, d_predicted.clamp_min(0))
    intercept = tp[1:] - slope * predicted[1:]
    both_positive = (predicted[:-1] > 0) & (predicted[1:] > 0)
    ratio = torch.where(both_positive, _divide_no_nan(predicted[:-1], predicted[1:].clamp_min(0)),
                        torch.ones_like(predicted[1:]))
    return _divide_no_nan(slope * (d_tp + intercept * torch.log(ratio)), (tp[1:] + fn[1:]).clamp_min(0)).sum(dim=0)
