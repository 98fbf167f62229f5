"""How the steps of one ``fit`` epoch run: the part of ``fit`` a strategy's capabilities decide.

``fit_loop.fit`` is one loop for every strategy. Per epoch it asks a runner to
(1) train the epoch's steps, (2) produce the epoch's logs, the same on every
process, and (3) say whether training stops, the same on every process:

- ``LocalRunner`` (every synchronous strategy): this process runs each step
  with ``model.train_step``, in lockstep with the other replicas.
- ``CoordinatedRunner`` (strategies that ``SchedulesSteps``): steps are
  scheduled on a ``ClusterCoordinator``'s workers; the chief computes the logs
  and the stop decision and hands them to every task.

Collectives: a default fit makes one per step, the gradient all-reduce inside
backward. Everything else is declared by the callbacks (``Callback.
requires_global_batch_logs``, ``Callback.stops_training``) and costs nothing
when nobody asks for it. Callback lists may differ by replica: what any
replica's callbacks ask for is agreed once at the start of ``fit``
(``Strategy.any_replica``, through the rendezvous store), so every replica
makes the same collectives.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import numpy as np
import torch

from stratagem._nest import batch_size_of, map_structure
from stratagem.callbacks import CallbackList
from stratagem.callbacks.backup_and_restore import BackupAndRestore
from stratagem.data.device import prefetch_to_device
from stratagem.distribute import collectives, context
from stratagem.distribute.input_lib import _as_tensor
from stratagem.models.data_adapter import EpochFeeder, unpack
from stratagem.errors import ConfigurationError
from stratagem.models.fit_state import FitState

Logs = dict[str, float]
Validate = Callable[[], Logs]


class LocalRunner:
    """Runs every step of the epoch on this process (Mirrored, MultiWorker, CentralStorage, OneDevice)."""

    def __init__(self, model: Any, feeder: EpochFeeder, callbacks: CallbackList) -> None:
        self.model, self.feeder, self.callbacks = model, feeder, callbacks
        strategy = model.distribute_strategy
        self._replicas = strategy.num_replicas_in_sync
        self._global_batch_logs, self._agree_each_step, self._agree_each_epoch = _agree_on_needs(strategy, callbacks)
        self._agree_each_step &= self._replicas > 1
        self._agree_each_epoch &= self._replicas > 1
        self._warned_deferred_stop = False

    def train_epoch(self, epoch: int, state: FitState) -> None:
        model, callbacks = self.model, self.callbacks
        model.module.train()
        timer = _InputTimer(prefetch_to_device(self.feeder.epoch(epoch), model.distribute_strategy.device))
        for step, (batch, global_batch_size, _) in enumerate(timer, state.step):
            callbacks.call("on_train_batch_begin", step, None)
            # NOTE: the loss is divided by the GLOBAL batch (every replica's rows of
            # this step), which the batch carries: gradients are then summed.
            # DDP's gradient all-reduce runs in backward: a peer that died or hangs is named here.
            with context.global_batch(global_batch_size), \
                    collectives.step_collective_errors("the gradient all-reduce", tag=f"epoch{epoch}/step{step}"):
                model.train_step(batch)
            state.step = step + 1
            if self._global_batch_logs:  # a collective: made on every replica, whether its callbacks look or not
                callbacks.call("on_train_batch_end", step, model.get_metrics_result())
            elif callbacks.wants("on_train_batch_end"):
                logs = LocalLogs(model)
                callbacks.call("on_train_batch_end", step, logs)
                logs.settle()
            if self._agree_each_step:
                _agree_on_stop(model)
            if model.stop_training and self._may_stop_now():
                break
        model.input_wait_fraction = timer.wait_fraction()
        if self.feeder.exhausted:
            model.stop_training = True  # every replica reads the same global batches: all see the end

    def epoch_logs(self, validate: Validate | None) -> Logs:
        logs = self.model.get_metrics_result()  # one all-reduce of every metric's state
        if validate is not None:
            logs.update(validate())
        return logs

    def agree_on_stop(self) -> bool:
        if self._agree_each_epoch:
            _agree_on_stop(self.model)
        return bool(self.model.stop_training)

    def _may_stop_now(self) -> bool:
        if self._replicas == 1 or self._agree_each_step:
            return True
        # One replica's batch hook stopped, and no callback declared it might: the
        # others do not know, so leaving now would hang their next all-reduce.
        if not self._warned_deferred_stop and self.model.distribute_strategy.is_chief:
            warnings.warn(
                "model.stop_training was set in a batch hook; with several replicas the stop takes effect at the "
                "end of the epoch. Set `stops_training = \"batch\"` on the callback to stop after the batch "
                "(one small all-reduce per step).", stacklevel=3)
        self._warned_deferred_stop = True
        return False


class LocalLogs(MutableMapping[str, float]):
    """A step's batch logs from this replica's metrics, read only when a callback looks at them.

    Why lazy: reading a metric is a host sync on an accelerator, and the
    progress bar looks at most every 0.1 s (every 10 s into a pipe), so most
    steps read nothing. Only local logs may wait: a global read is a collective,
    which every replica must make at the same step.
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._logs: dict[str, float] | None = None

    def settle(self) -> None:
        """Reads the logs now if a callback kept them: it expects this step's values later."""
        # Three references are the caller's name, `self` and getrefcount's argument.
        if sys.getrefcount(self) > 3:
            self._read()

    def _read(self) -> dict[str, float]:
        if self._logs is None:
            self._logs = self._model.get_metrics_result(local=True)
        return self._logs

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __setitem__(self, key: str, value: float) -> None:
        self._read()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return repr(self._read())


def _agree_on_needs(strategy: Any, callbacks: CallbackList) -> tuple[bool, bool, bool]:
    """What any replica's callbacks need: (global batch logs, a stop agreement per step, per epoch)."""
    backs_up = callbacks.any(lambda c: isinstance(c, BackupAndRestore))
    needs = [callbacks.any(lambda c: c.requires_global_batch_logs),
             callbacks.any(lambda c: c.stops_training == "batch"),
             callbacks.any(lambda c: c.stops_training in ("epoch", "batch")), backs_up, not backs_up]
    # NOTE: callbacks may differ by replica (Horovod's `verbose=1 if rank == 0 else 0`,
    # checkpoints on rank 0 only), and the collectives of the loop follow from them: every
    # replica takes the union of what any replica's callbacks need, agreed once here.
    global_logs, stop_each_step, stop_each_epoch, some_back_up, some_do_not = strategy.any_replica(needs)
    if some_back_up and some_do_not:
        raise ConfigurationError(
            f"[rank {strategy.replica_id_in_sync_group}/{strategy.num_replicas_in_sync}] BackupAndRestore was given "
            "to fit on some replicas only. Each backup gathers every replica's RNG state (a collective), so the "
            "replicas without it would never join and fit would hang. Pass the same BackupAndRestore on every "
            f"replica; only the chief writes. Received: has_backup_and_restore={backs_up}")
    return global_logs, stop_each_step, stop_each_epoch


def _agree_on_stop(model: Any) -> None:
    """Stops every replica if any replica asked to stop (one tiny all-reduce)."""
    strategy = model.distribute_strategy
    flag = torch.tensor(1.0 if model.stop_training else 0.0, device=strategy.device)
    model.stop_training = bool(strategy.reduce("max", flag, axis=None).item())


class CoordinatedRunner:
    """Schedules each step on a ``ClusterCoordinator`` worker (ParameterServerStrategy).

    Each step returns its metric sums, which the chief adds up, so epoch logs
    count every step once whichever worker ran it. Batch-level hooks are not
    called (the chief does not see steps one by one). Validation runs on the
    chief after each epoch's ``join``, on the servers' current values.
    """

    def __init__(self, model: Any, stream: Callable[[Any], Iterator[Any]], *, steps_per_epoch: int) -> None:
        from stratagem.distribute.coordinator import ClusterCoordinator

        self.model, self.steps = model, steps_per_epoch
        self.strategy = model.distribute_strategy
        self.coordinator = ClusterCoordinator(self.strategy)
        self._iterator = iter(self.coordinator.create_per_worker_dataset(stream))
        self._metrics = model.metrics

    def _train_function(self, batches: Iterator[Any]) -> list[torch.Tensor]:
        batch = map_structure(_as_tensor, next(batches))  # numpy batches become tensors, as on the other paths
        model = self.model
        model.reset_metrics()
        model.module.train()
        with context.global_batch(batch_size_of(unpack(batch)[0])):  # one step is one worker's batch
            self.strategy.run(model.train_step, args=(batch,))
        return [v.detach().cpu().clone() for metric in self._metrics for v in metric.variables]

    def train_epoch(self, epoch: int, state: FitState) -> None:
        results = [self.coordinator.schedule(self._train_function, args=(self._iterator,)) for _ in range(self.steps)]
        self.coordinator.join()
        self.strategy.pull_all()  # callbacks (checkpoints, exports) see the servers' values
        if self.strategy.is_chief:
            _accumulate(self._metrics, [r.fetch() for r in results])

    def epoch_logs(self, validate: Validate | None) -> Logs:
        logs: Logs = {}
        if self.strategy.is_chief:
            logs = self.model.get_metrics_result()
            if validate is not None:
                logs.update(validate())
        # NOTE: the chief alone computes the epoch's logs; the workers take them from it, so their
        # callbacks decide as the chief's do (a restarted worker replaying epoch 0 would see other
        # values if it evaluated for itself) and no worker spends time on validation.
        return dict(self.coordinator.share_from_chief(logs if self.strategy.is_chief else None))

    def agree_on_stop(self) -> bool:
        # The chief's decision wins, so no task schedules an epoch the others skip.
        mine = bool(self.model.stop_training) if self.strategy.is_chief else None
        self.model.stop_training = bool(self.coordinator.share_from_chief(mine))
        return self.model.stop_training


def _accumulate(metrics: list[Any], steps: list[list[np.ndarray]]) -> None:
    """Adds every step's metric sums into the chief's metrics (reset at the epoch's start)."""
    for step in steps:
        values = iter(step)
        for metric in metrics:
            for variable in metric.variables:
                variable += torch.as_tensor(next(values), dtype=variable.dtype).to(variable.device)


class _InputTimer:
    """Measures how long the loop waits for its next batch: an input-bound job shows it here."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self._clock = time.perf_counter
        self._batches = batches
        self._start = self._clock()
        self.waiting_s = 0.0

    def __iter__(self) -> Iterator[Any]:
        while True:
            start = self._clock()
            try:
                batch = next(self._batches)
            except StopIteration:
                return
            finally:
                self.waiting_s += self._clock() - start
            yield batch

    def wait_fraction(self) -> float:
        return self.waiting_s / max(self._clock() - self._start, 1e-9)


__all__ = ["CoordinatedRunner", "LocalLogs", "LocalRunner"]
