"""The loops behind ``fit``, ``evaluate`` and ``predict``, top to bottom.

``fit`` is one loop for every strategy (how an epoch's steps run is ``runners``'). Every replica runs these loops in
lockstep, with the same steps and collectives at the same points: a path one replica alone takes is a hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from stratagem._process import keep_freed_memory
from stratagem.callbacks import CallbackList, History
from stratagem.models.data_adapter import Batch, DataAdapter
from stratagem.models.fit_state import FitState
from stratagem.distribute.strategy import Strategy
from stratagem.models.runners import LocalLogs, Logs, Runner, Validate, step_function

if TYPE_CHECKING:  # model.py imports this module
    from stratagem.models.model import Model

def fit(model: Model, runner: Runner, *, state: FitState, epochs: int, callbacks: CallbackList, history: History,
        validate: Validate | None, validation_freq: int) -> History:
    model.stop_training = False
    keep_freed_memory()  # steps re-allocate the same large tensors: reuse them, no page faults
    callbacks.call("on_train_begin", None)  # BackupAndRestore may move `state` here
    logs: Logs = {}
    for epoch in range(state.epoch, epochs):
        if state.step == 0:  # mid-epoch resume: the epoch's metric sums were restored too
            model.reset_metrics()
        callbacks.call("on_epoch_begin", epoch, None)
        runner.train_epoch(epoch, state)
        state.epoch, state.step = epoch + 1, 0
        logs = runner.epoch_logs(validate if validate is not None and (epoch + 1) % validation_freq == 0 else None)
        logs.update(model.training_log_extras())  # e.g. float16 loss scaling's skipped steps
        callbacks.call("on_epoch_end", epoch, logs)
        if runner.agree_on_stop():
            break
    callbacks.call("on_train_end", logs)
    return history


def evaluate(model: Model, data: DataAdapter, *, steps: int | None, callbacks: CallbackList | None) -> dict[str, float]:
    model.reset_metrics()
    model.module.eval()
    _call(callbacks, "on_test_begin", None)
    test_step = step_function(model.test_step)
    with torch.no_grad():
        for step, (batch, global_batch_size, _) in enumerate(_take(data.epoch(0), steps)):
            _call(callbacks, "on_test_batch_begin", step, None)
            test_step(batch, global_batch_size)
            logs = LocalLogs(model)
            _call(callbacks, "on_test_batch_end", step, logs)
            logs.settle()
    results = model.get_metrics_result()
    _call(callbacks, "on_test_end", results)
    return results


def predict(model: Model, data: DataAdapter, *, steps: int | None, callbacks: CallbackList | None) -> Any:
    model.module.eval()
    outputs: list[Any] = []
    positions: list[torch.Tensor] = []
    _call(callbacks, "on_predict_begin", None)
    with torch.no_grad():
        for step, (batch, _, rows) in enumerate(_take(data.epoch(0), steps)):
            _call(callbacks, "on_predict_batch_begin", step, None)
            outputs.append(model.predict_step(batch))
            positions.append(torch.as_tensor(list(rows), dtype=torch.long))
            _call(callbacks, "on_predict_batch_end", step, None)
    _call(callbacks, "on_predict_end", None)
    return _gather_in_order(model.distribute_strategy, outputs, positions)


def _gather_in_order(strategy: Strategy, outputs: list[Any], positions: list[torch.Tensor]) -> Any:
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


def _take(batches: Iterator[Batch], steps: int | None) -> Iterator[Batch]:
    for step, batch in enumerate(batches):
        if steps is not None and step >= steps:
            return
        yield batch


def _call(callbacks: CallbackList | None, hook: str, *args: Any) -> None:
    if callbacks is not None:
        callbacks.call(hook, *args)


__all__ = ["fit", "evaluate", "predict"]
