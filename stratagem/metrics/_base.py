"""The ``Metric`` base class and the running means built on it (``Mean``, ``MeanMetricWrapper``).

A metric's state is a list of tensors (``Metric.variables``) that sum across replicas: the model all-reduces them
before it reads ``result()`` (``stratagem.models.compile_utils``), so logged values are exact over every replica's
examples. Metrics take no distribution arguments.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class Metric:
    """A running mean by default: ``update_state`` adds to ``total`` and ``count``; ``result`` divides.

    Subclasses with other state override ``variables`` (every state tensor, each a sum over examples) and
    ``result``.

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
            weight = torch.as_tensor(sample_weight).detach().to(values.device, torch.float64).reshape(values.shape)
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
        for variable in self.variables:
            variable.zero_()

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


class MeanSquaredError(MeanMetricWrapper):
    """Mean squared error (``keras.metrics.MeanSquaredError``)."""

    def __init__(self, name: str = "mean_squared_error") -> None:
        super().__init__(lambda t, p: (p - t.to(p.dtype).reshape(p.shape)) ** 2, name)


class MeanAbsoluteError(MeanMetricWrapper):
    """Mean absolute error (``keras.metrics.MeanAbsoluteError``)."""

    def __init__(self, name: str = "mean_absolute_error") -> None:
        super().__init__(lambda t, p: (p - t.to(p.dtype).reshape(p.shape)).abs(), name)
