"""``Model.fit`` under ``ParameterServerStrategy``: each step is scheduled on a free worker.

As in TensorFlow, ``steps_per_epoch`` is required: every worker reads its own
endless stream of batches (the arrays reshuffled each pass, with a seed per
worker; or the dataset repeated; or ``x(input_context)`` when ``x`` is a
function, TF's ``DatasetCreator``), so an epoch is a number of steps, not a
pass over the data. ``batch_size`` is the batch of one step (one worker).
Each step returns its metric sums, which the chief adds up, so epoch logs
count every step once whichever worker ran it; the workers receive the
chief's logs. Epoch-level callbacks run; batch-level hooks are not called
(the chief does not see steps one by one). Validation runs on the chief
after each epoch's ``join``, on the servers' current values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from stratagem.callbacks import Callback, History
from stratagem.errors import ConfigurationError
from stratagem.models.data_adapter import unpack


def fit(model: Any, x: Any, y: Any, *, batch_size: int | None, epochs: int, verbose: int | str,
        callbacks: Sequence[Callback] | None, validation_data: Any, shuffle: bool, sample_weight: Any,
        initial_epoch: int, steps_per_epoch: int | None, validation_steps: int | None,
        validation_batch_size: int | None, validation_freq: int) -> History:
    from stratagem.distribute.coordinator import ClusterCoordinator

    if steps_per_epoch is None or steps_per_epoch < 1:
        raise ConfigurationError(
            "Model.fit with ParameterServerStrategy needs steps_per_epoch: each worker reads its data as an "
            "endless stream, so an epoch is a number of steps (as in TensorFlow). Pass steps_per_epoch=N. "
            f"Received: steps_per_epoch={steps_per_epoch}")
    strategy = model.distribute_strategy
    coordinator = ClusterCoordinator(strategy)
    stream = _stream_factory(x, y, sample_weight, batch_size=batch_size or 32, shuffle=shuffle)
    iterator = iter(coordinator.create_per_worker_dataset(stream))
    metrics = model._require_compiled().all

    def train_function(batches: Iterator[Any]) -> list[torch.Tensor]:
        batch = next(batches)
        model.reset_metrics()
        model._global_batch_size = _batch_size(batch)
        model.module.train()
        strategy.run(model.train_step, args=(batch,))
        return [v.detach().cpu().clone() for metric in metrics for v in metric.variables]

    history = History()
    callback_list = model._callback_list(callbacks, history, verbose, epochs=epochs, steps=steps_per_epoch,
                                         batch_size=batch_size, samples=None)
    model.stop_training = False
    model._fit_position = _EpochPosition(initial_epoch)
    callback_list.call("on_train_begin", None)  # BackupAndRestore may move the position and restore the servers
    logs: dict[str, float] = {}
    for epoch in range(model._fit_position.epoch, epochs):
        model.reset_metrics()
        callback_list.call("on_epoch_begin", epoch, None)
        results = [coordinator.schedule(train_function, args=(iterator,)) for _ in range(steps_per_epoch)]
        coordinator.join()
        strategy.pull_all()  # callbacks (checkpoints, exports) see the servers' values
        if strategy.is_chief:
            _accumulate(metrics, [r.fetch() for r in results])
            logs = model.get_metrics_result()
            if validation_data is not None and (epoch + 1) % validation_freq == 0:
                logs.update(_validate(model, validation_data, validation_batch_size or batch_size, validation_steps))
        # NOTE: the chief alone computes the epoch's logs; the workers take them from it, so their
        # callbacks decide as the chief's do (a restarted worker replaying epoch 0 would see other
        # values if it evaluated for itself) and no worker spends time on validation.
        logs = coordinator._share(logs if strategy.is_chief else None)
        model._fit_position = _EpochPosition(epoch + 1)
        callback_list.call("on_epoch_end", epoch, logs)
        # The chief's decision to stop wins, so no task schedules an epoch the others skip.
        model.stop_training = bool(coordinator._share(bool(model.stop_training) if strategy.is_chief else None))
        if model.stop_training:
            break
    callback_list.call("on_train_end", logs)
    return history


def _validate(model: Any, data: Any, batch_size: int | None, steps: int | None) -> dict[str, float]:
    x, y, weight = unpack(data) if isinstance(data, tuple) else (data, None, None)
    val_logs = model.evaluate(x, y, batch_size=batch_size, verbose=0, sample_weight=weight, steps=steps,
                              return_dict=True)
    return {f"val_{key}": value for key, value in val_logs.items()}


class _EpochPosition:
    """Where a coordinated fit stands (whole epochs: steps run on workers, not here)."""

    def __init__(self, epoch: int) -> None:
        self.epoch, self.step = epoch, 0

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": 0}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])


def _accumulate(metrics: list[Any], steps: list[list[np.ndarray]]) -> None:
    """Adds every step's metric sums into the chief's metrics (reset at the epoch's start)."""
    for step in steps:
        values = iter(step)
        for metric in metrics:
            for variable in metric.variables:
                variable += torch.as_tensor(next(values), dtype=variable.dtype).to(variable.device)


def _batch_size(batch: Any) -> int:
    from stratagem._nest import batch_size_of

    return batch_size_of(unpack(batch)[0])


def _stream_factory(x: Any, y: Any, sample_weight: Any, *, batch_size: int, shuffle: bool) -> Callable[[Any], Iterator[Any]]:
    """What ``create_per_worker_dataset`` calls on each worker: an endless iterator of batches."""

    def make(context: Any) -> Iterator[Any]:
        if callable(x) and not hasattr(x, "__len__"):
            return _repeat(lambda: x(context))
        if y is None and not isinstance(x, (np.ndarray, torch.Tensor)):
            return _repeat(lambda: x)
        return _array_batches(x, y, sample_weight, batch_size, shuffle, seed=context.input_pipeline_id)

    return make


def _repeat(make: Callable[[], Any]) -> Iterator[Any]:
    while True:
        empty = True
        for batch in make():
            empty = False
            yield batch
        if empty:
            raise ValueError("The training data yielded no batch: fit needs at least one.")


def _array_batches(x: Any, y: Any, sample_weight: Any, batch_size: int, shuffle: bool, *, seed: int) -> Iterator[Any]:
    arrays = [np.asarray(a) if not isinstance(a, torch.Tensor) else a.numpy() for a in (x, y, sample_weight) if a is not None]
    count = len(arrays[0])
    if count < batch_size:
        raise ValueError(f"fit needs at least one full batch: {count} examples, batch_size={batch_size}.")
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(count) if shuffle else np.arange(count)
        for start in range(0, count - batch_size + 1, batch_size):  # full batches: a stream has no last batch
            rows = order[start : start + batch_size]
            yield tuple(torch.from_numpy(a[rows]) for a in arrays)
