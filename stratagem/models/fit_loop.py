"""The loops behind ``fit``, ``evaluate`` and ``predict``, top to bottom.

Every replica runs these same loops in lockstep: the same number of steps,
and the same collectives (gradient all-reduce inside backward, metric
all-reduce when logs are read) at the same points. Anything that could make
one replica take a different path from another is a hang waiting to happen.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from stratagem.callbacks import CallbackList, History
from stratagem.data.device import prefetch_to_device
from stratagem.models.data_adapter import ArrayAdapter, Batch, IterableAdapter

Adapter = ArrayAdapter | IterableAdapter


def fit(model: Any, train: Adapter, *, epochs: int, initial_epoch: int, steps_per_epoch: int | None,
        callbacks: CallbackList, history: History, validation: Adapter | None, validation_steps: int | None,
        validation_freq: int) -> History:
    position = model._fit_position = FitPosition(_EpochFeeder(train, steps_per_epoch), epoch=initial_epoch)
    model.stop_training = False
    callbacks.call("on_train_begin", None)  # BackupAndRestore may move `position` here
    logs: dict[str, float] = {}
    start_epoch, start_step = position.epoch, position.step
    for epoch in range(start_epoch, epochs):
        resuming = epoch == start_epoch and start_step > 0  # mid-epoch: metrics were restored too
        if not resuming:
            model.reset_metrics()
        model.module.train()
        callbacks.call("on_epoch_begin", epoch, None)
        timer = _InputTimer(prefetch_to_device(position.feeder.epoch(epoch), model.distribute_strategy.device))
        for step, (batch, global_batch_size, _) in enumerate(timer, start_step if resuming else 0):
            callbacks.call("on_train_batch_begin", step, None)
            model._global_batch_size = global_batch_size
            model.train_step(batch)
            position.epoch, position.step = epoch, step + 1
            # Reading logs is a collective: decided by the callback set, which
            # is identical on every replica, never by the chief alone.
            batch_logs = model.get_metrics_result() if callbacks.wants("on_train_batch_end") else None
            callbacks.call("on_train_batch_end", step, batch_logs)
            if batch_logs is not None:  # a batch hook may stop training: every replica must agree
                _agree_on_stop(model)
            if model.stop_training:
                break
        position.epoch, position.step = epoch + 1, 0
        model.input_wait_fraction = timer.wait_fraction()
        logs = model.get_metrics_result()
        if position.feeder.exhausted:
            model.stop_training = True
        if validation is not None and (epoch + 1) % validation_freq == 0:
            val_logs = evaluate(model, validation, steps=validation_steps, callbacks=None)
            logs.update({f"val_{key}": value for key, value in val_logs.items()})
        callbacks.call("on_epoch_end", epoch, logs)
        _agree_on_stop(model)
        if model.stop_training:
            break
    callbacks.call("on_train_end", logs)
    return history


def _agree_on_stop(model: Any) -> None:
    """Stops every replica if any callback on any replica asked to stop (one tiny all-reduce).

    Built-in callbacks decide from logs that are already global, so they agree
    anyway; a user callback deciding from local state would otherwise leave the
    other replicas waiting in the next step's all-reduce.
    """
    strategy = model.distribute_strategy
    if strategy.num_replicas_in_sync > 1:
        flag = torch.tensor(1.0 if model.stop_training else 0.0, device=strategy.device)
        model.stop_training = bool(strategy.reduce("max", flag, axis=None).item())


def evaluate(model: Any, data: Adapter, *, steps: int | None, callbacks: CallbackList | None) -> dict[str, float]:
    model.reset_metrics()
    model.module.eval()
    _call(callbacks, "on_test_begin", None)
    with torch.no_grad():
        for step, (batch, global_batch_size, _) in enumerate(_take(data.epoch(0), steps)):
            _call(callbacks, "on_test_batch_begin", step, None)
            model._global_batch_size = global_batch_size
            model.test_step(batch)
            wants = callbacks is not None and callbacks.wants("on_test_batch_end")
            _call(callbacks, "on_test_batch_end", step, model.get_metrics_result() if wants else None)
    logs = model.get_metrics_result()
    _call(callbacks, "on_test_end", logs)
    return logs


def predict(model: Any, data: Adapter, *, steps: int | None, callbacks: CallbackList | None) -> Any:
    model.module.eval()
    outputs: list[Any] = []
    positions: list[torch.Tensor] = []
    _call(callbacks, "on_predict_begin", None)
    with torch.no_grad():
        for step, (batch, _, rows) in enumerate(_take(data.epoch(0), steps)):
            _call(callbacks, "on_predict_batch_begin", step, None)
            outputs.append(model.predict_step(batch))
            positions.append(rows)
            _call(callbacks, "on_predict_batch_end", step, None)
    _call(callbacks, "on_predict_end", None)
    return _gather_in_order(model.distribute_strategy, outputs, positions)


def _gather_in_order(strategy: Any, outputs: list[Any], positions: list[torch.Tensor]) -> Any:
    """Collects every replica's predictions and puts them back in input order."""
    if not outputs:
        raise ValueError("predict received no batches: the input is empty")
    local_positions = torch.cat(positions)
    all_positions = strategy.gather(local_positions.to(strategy.device), axis=0).cpu()
    order = torch.argsort(all_positions)

    def collect(*parts: torch.Tensor) -> Any:
        gathered = strategy.gather(torch.cat(parts).to(strategy.device), axis=0).cpu()
        return gathered[order].numpy()

    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return collect(*outputs)
    # Multi-output models: gather each output separately.
    if isinstance(first, dict):
        return {key: collect(*(o[key] for o in outputs)) for key in first}
    return type(first)(collect(*(o[i] for o in outputs)) for i in range(len(first)))


class _InputTimer:
    """Measures how long the loop waits for its next batch: an input-bound job shows it here."""

    def __init__(self, batches: Iterator[Batch]) -> None:
        self._batches = batches
        self._start = time.perf_counter()
        self.waiting_s = 0.0

    def __iter__(self) -> Iterator[Batch]:
        while True:
            start = time.perf_counter()
            try:
                batch = next(self._batches)
            except StopIteration:
                return
            finally:
                self.waiting_s += time.perf_counter() - start
            yield batch

    def wait_fraction(self) -> float:
        return self.waiting_s / max(time.perf_counter() - self._start, 1e-9)


class FitPosition:
    """Where ``fit`` stands: the next epoch and step, and the data feeder (BackupAndRestore saves it)."""

    def __init__(self, feeder: _EpochFeeder, *, epoch: int) -> None:
        self.feeder, self.epoch, self.step = feeder, epoch, 0

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step, "data": self.feeder.position()}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.feeder.restore(state["data"], mid_epoch=self.step > 0)


class _EpochFeeder:
    """Yields each epoch's batches; with ``steps_per_epoch``, one stream across epochs (Keras)."""

    def __init__(self, adapter: Adapter, steps_per_epoch: int | None) -> None:
        self.adapter, self.steps = adapter, steps_per_epoch
        self.exhausted = False
        self._passes = 0
        self._stream: Iterator[Batch] | None = None
        self._resume: dict[str, Any] | None = None

    def position(self) -> dict[str, Any]:
        return {"adapter": self.adapter.position(), "passes": self._passes}

    def restore(self, position: dict[str, Any], *, mid_epoch: bool) -> None:
        self.adapter.restore(position["adapter"])  # the agreed shuffle seed, always
        self._passes = int(position["passes"])
        # Within an epoch (or a stream that spans epochs) continue where the data stood.
        if mid_epoch or self.steps is not None:
            self._resume = position["adapter"]

    def epoch(self, epoch: int) -> Iterator[Batch]:
        if self.steps is None:
            resume, self._resume = self._resume, None
            yield from self.adapter.epoch(epoch, resume=resume)
            return
        for _ in range(self.steps):
            batch = self._next()
            if batch is None:
                return
            yield batch

    def _next(self) -> Batch | None:
        if self._stream is None:
            resume, self._resume = self._resume, None
            self._stream = self.adapter.epoch(self._passes, resume=resume)
        try:
            return next(self._stream)
        except StopIteration:
            pass
        if isinstance(self.adapter, ArrayAdapter):
            # Arrays start a new, reshuffled pass when one runs out.
            self._passes += 1
            self._stream = self.adapter.epoch(self._passes)
            return next(self._stream)
        # All replicas iterate the same global batches, so they run out together.
        warnings.warn(
            "The input ran out of data before steps_per_epoch * epochs steps; training stops here. "
            "Make the dataset repeat(), or lower steps_per_epoch.", stacklevel=2,
        )
        self.exhausted = True
        return None


def _take(batches: Iterator[Batch], steps: int | None) -> Iterator[Batch]:
    for step, batch in enumerate(batches):
        if steps is not None and step >= steps:
            return
        yield batch


def _call(callbacks: CallbackList | None, hook: str, *args: Any) -> None:
    if callbacks is not None:
        callbacks.call(hook, *args)


__all__ = ["fit", "evaluate", "predict"]
