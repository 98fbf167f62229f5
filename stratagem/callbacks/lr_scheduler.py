"""Callbacks that set the optimizer's learning rate between epochs.

``LearningRateScheduler`` follows a user schedule; ``ReduceLROnPlateau`` lowers the rate when a monitored value
stops improving. Both run on every replica and decide from ``logs``, which are already reduced across replicas, so
every replica sets the same learning rate at the same epoch. Both add ``learning_rate`` to the epoch's ``logs``, as
Keras 3 does.
"""

from __future__ import annotations


import inspect
import math
import numbers
import warnings
from collections.abc import Callable

import numpy as np
from typing_extensions import override

from stratagem.callbacks.callback import Callback, check_mode


class LearningRateScheduler(Callback):
    """Sets the learning rate at the start of each epoch from ``schedule``.

    ``schedule(epoch, lr)`` gets the 0-based epoch and the current rate and returns the new rate; a one-argument
    ``schedule(epoch)`` works too, as in Keras. It runs on every replica, so it must give the same answer on each
    (no unseeded randomness): replicas with different rates drift apart.

    Args:
        schedule: ``(epoch, lr) -> lr`` or ``(epoch) -> lr``.
        verbose: 1 prints the new rate on the chief each epoch.

    Raises:
        ValueError: At an epoch's start, if ``schedule`` returns something other than a real number.

    Example:
        >>> def decay(epoch):
        ...     return 1e-3 if epoch < 3 else 1e-4 if epoch < 7 else 1e-5
        >>> scheduler = stratagem.callbacks.LearningRateScheduler(decay)  # doctest: +SKIP
        >>> model.fit(x, y, epochs=12, callbacks=[scheduler])  # doctest: +SKIP
    """

    stops_training = "never"

    def __init__(self, schedule: Callable[..., float], verbose: int = 0) -> None:
        super().__init__()
        if not callable(schedule):  # Keras fails at the first epoch with "'int' object is not callable"
            raise TypeError("LearningRateScheduler takes a function schedule(epoch, lr) -> new learning rate, e.g. "
                            f"lambda epoch, lr: lr * 0.9. Received: schedule of type {type(schedule).__name__}")
        self.schedule = schedule
        self.verbose = verbose

    @override
    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if self.fit_state is not None and self.fit_state.step > 0:
            # Resumed mid-epoch (BackupAndRestore): this epoch's rate was set before the backup and came back with the
            # optimizer; scheduling again would apply a schedule(epoch, lr) twice.
            return
        learning_rate = self._call_schedule(epoch, float(self._optimizer.learning_rate))
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real):
            raise ValueError("The output of the `schedule` function should be a float. "
                             f"Received: {learning_rate!r} of type {type(learning_rate).__name__}")
        self._optimizer.learning_rate = float(learning_rate)
        self._say(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {float(learning_rate)}.")

    @override
    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if logs is not None:
            logs["learning_rate"] = float(self._optimizer.learning_rate)

    def _call_schedule(self, epoch: int, learning_rate: float) -> object:
        # Keras tries (epoch, lr) and falls back to (epoch) on TypeError. Checking the signature first picks the same
        # form without hiding a TypeError raised inside the schedule itself.
        try:
            inspect.signature(self.schedule).bind(epoch, learning_rate)
        except TypeError:
            return self.schedule(epoch)
        except ValueError:  # no signature to inspect (some builtins): do as Keras does
            try:
                return self.schedule(epoch, learning_rate)
            except TypeError:
                return self.schedule(epoch)
        return self.schedule(epoch, learning_rate)


class ReduceLROnPlateau(Callback):
    """Multiplies the learning rate by ``factor`` when ``monitor`` stops improving (Keras' algorithm, step for step).

    After ``patience`` epochs without an improvement of more than ``min_delta`` the rate becomes ``max(lr * factor,
    min_lr)``; then ``cooldown`` epochs pass before the waiting starts again.

    Args:
        monitor: The ``logs`` key to watch.
        factor: The multiplier, below 1.0.
        patience: Epochs without improvement before a reduction.
        verbose: 1 prints each reduction on the chief.
        mode: ``"min"``, ``"max"``, or ``"auto"`` (``"max"`` if ``monitor`` contains ``"acc"``, else ``"min"``).
        min_delta: The least change that counts as an improvement.
        cooldown: Epochs to wait after a reduction before counting again.
        min_lr: The rate never goes below this.

    Raises:
        ValueError: If ``factor`` is 1.0 or more, or ``mode`` is unknown.

    Example:
        >>> reduce_lr = stratagem.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=5)  # doctest: +SKIP
    """

    stops_training = "never"

    _state_keys = ('best', 'cooldown_counter', 'wait')

    def __init__(self, monitor: str = "val_loss", factor: float = 0.1, patience: int = 10, verbose: int = 0,
                 mode: str = "auto", min_delta: float = 1e-4, cooldown: int = 0, min_lr: float = 0.0) -> None:
        super().__init__()
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau does not support a factor >= 1.0: the rate must go down. "
                             f"Received: factor={factor}")
        check_mode("ReduceLROnPlateau", mode)
        self.monitor, self.factor, self.patience, self.verbose = monitor, factor, patience, verbose
        self.mode, self.min_delta, self.cooldown, self.min_lr = mode, min_delta, cooldown, min_lr
        self._reset()

    def _reset(self) -> None:
        self.maximize = self.mode == "max" or (self.mode == "auto" and "acc" in self.monitor)
        self.best = -math.inf if self.maximize else math.inf
        self.cooldown_counter = 0
        self.wait = 0

    def _improved(self, current: float) -> bool:
        if self.maximize:
            return current > self.best + self.min_delta
        return current < self.best - self.min_delta

    def in_cooldown(self) -> bool:
        """True while epochs of the cooldown after a reduction remain."""
        return self.cooldown_counter > 0

    @override
    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        self._reset()

    @override
    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        logs = logs if logs is not None else {}
        logs["learning_rate"] = float(self._optimizer.learning_rate)  # the rate this epoch trained with
        current = logs.get(self.monitor)
        if current is None:
            if self.model.distribute_strategy.is_chief:
                warnings.warn(f"Learning rate reduction is conditioned on metric `{self.monitor}` which is not "
                              f"available. Available metrics are: {','.join(logs)}.", stacklevel=2)
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self._improved(current):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                self._reduce(epoch)

    def _reduce(self, epoch: int) -> None:
        old_lr = float(self._optimizer.learning_rate)
        # Keras compares in float32: a rate already at min_lr up to float32 rounding stays put.
        if not _float32(old_lr) > _float32(self.min_lr):
            return
        new_lr = max(old_lr * self.factor, self.min_lr)
        self._optimizer.learning_rate = new_lr
        self._say(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to {new_lr}.")
        self.cooldown_counter = self.cooldown
        self.wait = 0


def _float32(value: float) -> float:
    return float(np.float32(value))
