"""``EarlyStopping``: stops ``fit`` when a monitored value has stopped improving.

Every replica runs the same algorithm on the same ``logs`` (already reduced across replicas), so every replica sets
``stop_training`` at the same epoch and none is left waiting in a collective. The best weights, when kept, are an
in-memory copy on every replica; the replicas hold identical weights, so restoring them needs no communication.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from typing_extensions import override

from stratagem.callbacks.callback import Callback, check_mode


class EarlyStopping(Callback):
    """Stops training when ``monitor`` has not improved for ``patience`` epochs (Keras 3's algorithm).

    An epoch improves when ``monitor`` beats the best so far by more than ``min_delta``; with a ``baseline`` the
    wait only restarts once the value also beats it. ``stopped_epoch`` is the 0-based epoch training stopped at (0
    if not).

    Args:
        monitor: The ``logs`` key to watch.
        min_delta: The least change that counts as an improvement.
        patience: Epochs without improvement before stopping.
        verbose: 1 prints a line on the chief when stopping or restoring.
        mode: ``"min"``, ``"max"``, or ``"auto"`` (a loss is minimised; accuracy-like names are maximised,
            error-like names minimised).
        baseline: A value the monitor must beat before the wait restarts.
        restore_best_weights: At the end of training, load the weights of the best epoch.
        start_from_epoch: Epochs to let pass before watching.

    Raises:
        ValueError: If ``mode`` is unknown, or, at the first epoch's end, if ``mode="auto"`` cannot tell which way
            ``monitor`` should go.

    Example:
        >>> early = stratagem.callbacks.EarlyStopping(monitor="val_loss", patience=3)  # doctest: +SKIP
        >>> model.fit(x, y, validation_data=(x_val, y_val), epochs=100, callbacks=[early])  # doctest: +SKIP
    """

    stops_training = "global_logs"  # from val/epoch logs, identical on every replica

    # The best weights themselves stay in memory only: a restart restores the counters, not them.
    _state_keys = ('wait', 'stopped_epoch', 'best', 'best_epoch')

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0, patience: int = 0, verbose: int = 0,
                 mode: str = "auto", baseline: float | None = None, restore_best_weights: bool = False,
                 start_from_epoch: int = 0) -> None:
        super().__init__()
        check_mode("EarlyStopping", mode)
        self.monitor, self.patience, self.verbose, self.mode = monitor, patience, verbose, mode
        self.baseline, self.start_from_epoch = baseline, start_from_epoch
        self.restore_best_weights = restore_best_weights
        self.min_delta = abs(min_delta)
        self.maximize: bool | None = None  # decided at the first epoch end, once the metrics are known
        self.on_train_begin()

    @override
    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        # Every fit starts afresh, so the instance can be reused for another fit.
        self.wait = 0
        self.stopped_epoch = 0
        self.best: float | None = None
        self.best_epoch = 0
        self.best_weights: dict[str, torch.Tensor] | None = None

    @override
    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if self.maximize is None:
            self.maximize = self._resolve_direction()
        current = self._get_monitor_value(logs or {})
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            # Best weights never set: the current weights are the best.
            self.best_weights = self._copy_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self._copy_weights()
            # Only restart the wait once we beat both the baseline and the previous best.
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    @override
    def on_train_end(self, logs: dict[str, float] | None = None) -> None:
        if self.stopped_epoch > 0:
            self._say(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            self._say(f"Restoring model weights from the end of the best epoch: {self.best_epoch + 1}.")
            # Every replica restores its own copy; they are identical, so the replicas stay in sync without a
            # broadcast.
            self.model.module.load_state_dict(self.best_weights)

    def _is_improvement(self, value: float, reference: float | None) -> bool:
        if reference is None:
            return True
        if self.maximize:
            return value - self.min_delta > reference
        return value + self.min_delta < reference

    def _get_monitor_value(self, logs: dict[str, float]) -> float | None:
        value = logs.get(self.monitor)
        if value is None and self.model.distribute_strategy.is_chief:
            warnings.warn(f"Early stopping conditioned on metric `{self.monitor}` which is not available. "
                          f"Available metrics are: {','.join(logs)}", stacklevel=2)
        return value

    def _copy_weights(self) -> dict[str, torch.Tensor]:
        return {name: tensor.detach().clone() for name, tensor in self.model.module.state_dict().items()}

    def _resolve_direction(self) -> bool:
        """True to maximise ``monitor``: from ``mode``, else the metric, else its name (Keras 3)."""
        if self.mode != "auto":
            return self.mode == "max"
        direction = _direction(self.monitor.removeprefix("val_"), getattr(self.model, "metrics", []))
        if direction is None:
            raise ValueError(
                f"EarlyStopping callback received monitor={self.monitor} but stratagem isn't able to "
                "automatically determine whether that metric should be maximized or minimized. Pass "
                "`mode='max'` in order to do early stopping based on the highest metric value, or pass "
                f"`mode='min'` in order to use the lowest value. Received: monitor={self.monitor!r}")
        return direction == "up"


def _direction(name: str, metrics: list[Any]) -> str | None:
    """``"up"``, ``"down"`` or None for a metric name (the ``val_`` prefix removed)."""
    if name == "loss":
        return "down"
    for metric in metrics:
        if getattr(metric, "name", None) == name and getattr(metric, "_direction", None) in ("up", "down"):
            return metric._direction  # a user metric may say which way is better, as in Keras 3
    if "acc" in name or "auc" in name or name.startswith("fmeasure"):
        return "up"
    if "error" in name or "loss" in name or name in ("mse", "mae"):
        return "down"
    return None
