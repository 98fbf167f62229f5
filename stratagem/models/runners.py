"""How the steps of one ``fit`` epoch run: the part of ``fit`` a strategy's capabilities decide.

``fit_loop.fit`` is one loop; per epoch a ``Runner`` trains the steps and gives the logs and the stop decision, the
same on every process. ``make_runner`` picks ``LocalRunner`` (synchronous strategies: ``model.train_step`` in
lockstep with the other replicas) or ``CoordinatedRunner`` (strategies that ``SchedulesSteps``: a
``ClusterCoordinator``'s workers run the steps, and the chief follows them as they complete, runs the batch hooks
and hands the logs and decision to every task). A default fit makes one collective per step, the gradient all-reduce
in backward; what callbacks ask for beyond it (``requires_global_batch_logs``, ``stops_training``) is agreed once at
the start of ``fit`` (``Strategy.any_replica``), so replicas whose callback lists differ still make the same
collectives.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from stratagem._nest import batch_size_of, map_structure
from stratagem.callbacks import Callback, CallbackList
from stratagem.callbacks.backup_and_restore import BackupAndRestore
from stratagem.callbacks.callback import StopsTraining
from stratagem.data.device import prefetch_to_device
from stratagem.distribute import collectives
from stratagem.distribute.capabilities import SchedulesSteps, has
from stratagem.distribute.input_context import InputContext
from stratagem.distribute.input_lib import _as_tensor
from stratagem.distribute.strategy import Strategy
from stratagem.errors import ConfigurationError
from stratagem.metrics import Metric
from stratagem.models.data_adapter import EpochFeeder, make_adapter, unpack, worker_stream
from stratagem.models.fit_state import FitState

if TYPE_CHECKING:  # model.py imports this module
    from stratagem.distribute.coordinator import RemoteValue
    from stratagem.models.model import Model

Logs = dict[str, float]
Validate = Callable[[], Logs]


class Runner(Protocol):
    """How one ``fit`` epoch's steps run; ``fit_loop.fit`` asks nothing else of it."""

    def train_epoch(self, epoch: int, state: FitState) -> None:
        """Runs the epoch's steps from ``state.step``, keeping ``state.step`` current."""
        ...

    def epoch_logs(self, validate: Validate | None) -> Logs:
        """The epoch's logs (with validation's ``val_`` keys), the same on every process."""
        ...

    def agree_on_stop(self) -> bool:
        """Whether training stops now, the same answer on every process."""
        ...


@dataclass(frozen=True)
class FitInput:
    """What ``Model.fit`` trains on, after its checks: the data and how to walk it."""

    x: Any
    y: Any
    sample_weight: Any
    batch_size: int | None
    shuffle: bool
    seed: int  # the shuffle seed, the same on every replica
    steps_per_epoch: int | None
    epochs: int
    initial_epoch: int


def make_runner(model: Model, fit_input: FitInput,
                callback_list_for: Callable[[FitState, dict[str, Any]], CallbackList],
                ) -> tuple[Runner, FitState, CallbackList]:
    """The runner for the model's strategy, the fit's ``FitState`` and its callbacks (``callback_list_for``)."""
    strategy, data = model.distribute_strategy, fit_input
    if has(strategy, SchedulesSteps):
        steps = data.steps_per_epoch
        if steps is None or steps < 1:
            raise ConfigurationError(
                f"Model.fit with {type(strategy).__name__} needs steps_per_epoch: each worker reads its data as an "
                "endless stream, so an epoch is a number of steps (as in TensorFlow). Pass steps_per_epoch=N. "
                f"Received: steps_per_epoch={steps}")
        stream = worker_stream(data.x, data.y, data.sample_weight, batch_size=data.batch_size or 32,
                               shuffle=data.shuffle)
        state = FitState(None, epoch=data.initial_epoch)
        callbacks = callback_list_for(state, {"steps": steps, "batch_size": data.batch_size, "samples": None})
        return CoordinatedRunner(model, stream, steps_per_epoch=steps, callbacks=callbacks), state, callbacks
    train = make_adapter(data.x, data.y, data.sample_weight, batch_size=data.batch_size, shuffle=data.shuffle,
                         seed=data.seed, strategy=strategy)
    feeder = EpochFeeder(train, data.steps_per_epoch, epochs=data.epochs)
    state = FitState(feeder, epoch=data.initial_epoch)
    callbacks = callback_list_for(state, {"steps": data.steps_per_epoch or train.steps,
                                          "batch_size": getattr(train, "batch_size", None),
                                          "samples": getattr(train, "num_samples", None)})
    return LocalRunner(model, feeder, callbacks), state, callbacks


class LocalRunner:
    """Runs every step of the epoch on this process (Mirrored, MultiWorker, CentralStorage, OneDevice)."""

    def __init__(self, model: Model, feeder: EpochFeeder, callbacks: CallbackList) -> None:
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
        train_step = step_function(model.train_step)
        for step, (batch, global_batch_size, _) in enumerate(timer, state.step):
            callbacks.call("on_train_batch_begin", step, None)
            # NOTE: the loss is divided by the GLOBAL batch (every replica's rows of this step), which the batch
            # carries: gradients are then summed. DDP's gradient all-reduce runs in backward: a peer that died or
            # hangs is named here.
            tag = f"epoch{epoch}/step{step}"
            with collectives.collective_errors("the gradient all-reduce", timeout_s=None, tag=tag):
                train_step(batch, global_batch_size)
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
        # One replica's batch hook stopped, and no callback declared it might: the others do not know, so leaving now
        # would hang their next all-reduce.
        if not self._warned_deferred_stop and self.model.distribute_strategy.is_chief:
            warnings.warn(
                "model.stop_training was set in a batch hook; with several replicas the stop takes effect at the "
                "end of the epoch. Set `stops_training = \"batch\"` on the callback to stop after the batch "
                "(one small all-reduce per step).", stacklevel=3)
        self._warned_deferred_stop = True
        return False


class LocalLogs(MutableMapping[str, float]):
    """A step's batch logs from this replica's metrics, read only when a callback looks at them.

    Lazy because reading a metric is a host sync on an accelerator and the progress bar looks rarely; only local logs
    may wait, since a global read is a collective every replica must make at the same step. Logs a callback keeps past
    its hook still give this step's values: ``settle()``, after the hooks, keeps a device copy of the metrics' state,
    from which a later read computes them.
    """

    def __init__(self, model: Model) -> None:
        self._model = model
        self._logs: dict[str, float] | None = None
        self._kept: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # (metric state, its value at this step)

    def settle(self) -> None:
        """Freezes the logs at this step's values: the next step changes the metrics they read."""
        if self._logs is None and self._kept is None:
            self._kept = [(v, v.detach().clone()) for metric in self._model.metrics for v in metric.variables]

    def _read(self) -> dict[str, float]:
        if self._logs is None:
            if self._kept is None:
                self._logs = self._model.get_metrics_result(local=True)
            else:
                self._logs = self._read_kept(self._kept)
        return self._logs

    def _read_kept(self, kept: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
        now = [state.detach().clone() for state, _ in kept]
        with torch.no_grad():
            for state, value in kept:
                state.copy_(value)
            try:
                return dict(self._model.get_metrics_result(local=True))
            finally:
                for (state, _), value in zip(kept, now):
                    state.copy_(value)

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


def _agree_on_needs(strategy: Strategy, callbacks: CallbackList) -> tuple[bool, bool, bool]:
    """What any replica's callbacks need: (global batch logs, a stop agreement per step, per epoch)."""
    backs_up = callbacks.any(lambda c: isinstance(c, BackupAndRestore))
    stops = {_stops_training(c) for c in callbacks.callbacks}
    needs = [callbacks.any(lambda c: c.requires_global_batch_logs), StopsTraining.BATCH in stops,
             bool(stops & {StopsTraining.EPOCH, StopsTraining.BATCH}), backs_up, not backs_up]
    # NOTE: callbacks may differ by replica (Horovod's `verbose=1 if rank == 0 else 0`, checkpoints on rank 0 only),
    # and the collectives of the loop follow from them: every replica takes the union of what any replica's callbacks
    # need, agreed once here.
    global_logs, stop_each_step, stop_each_epoch, some_back_up, some_do_not = strategy.any_replica(needs)
    if some_back_up and some_do_not:
        raise ConfigurationError(
            f"[rank {strategy.replica_id_in_sync_group}/{strategy.num_replicas_in_sync}] BackupAndRestore was given "
            "to fit on some replicas only. Each backup gathers every replica's RNG state (a collective), so the "
            "replicas without it would never join and fit would hang. Pass the same BackupAndRestore on every "
            f"replica; only the chief writes. Received: has_backup_and_restore={backs_up}")
    return global_logs, stop_each_step, stop_each_epoch


def step_function(step: Callable[..., Any]) -> Callable[[Any, int], Any]:
    """``step(batch, global_batch_size=n)``; an override with Keras' signature (``data`` alone) gets ``step(batch)``."""
    try:
        parameters = inspect.signature(step).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: Keras' signature
        parameters = ()  # type: ignore[assignment]
    if any(p.name == "global_batch_size" or p.kind is p.VAR_KEYWORD for p in parameters):
        return lambda batch, global_batch_size: step(batch, global_batch_size=global_batch_size)
    return lambda batch, global_batch_size: step(batch)


def _stops_training(callback: Callback) -> StopsTraining:
    # Checked here too: an instance may set its own value, after its class was checked.
    return StopsTraining.parse(callback.stops_training, owner=type(callback).__name__)


def _agree_on_stop(model: Model) -> None:
    """Stops every replica if any replica asked to stop (one tiny all-reduce)."""
    strategy = model.distribute_strategy
    flag = torch.tensor(1.0 if model.stop_training else 0.0, device=strategy.device)
    model.stop_training = bool(strategy.reduce("max", flag, axis=None).item())


class CoordinatedRunner:
    """Schedules each step on a ``ClusterCoordinator`` worker (ParameterServerStrategy).

    Each step returns its metric sums. The chief follows the steps in order as they complete, adds each step's sums
    into its metrics (so logs count every step once, whichever worker ran it) and calls the batch hooks with the logs so
    far; workers call none. Validation runs on the chief after each epoch's ``join``, on the servers' current values.
    """

    def __init__(self, model: Model, stream: Callable[[InputContext], Iterator[Any]], *, steps_per_epoch: int,
                 callbacks: CallbackList) -> None:
        from stratagem.distribute.coordinator import ClusterCoordinator

        self.model, self.steps, self.callbacks = model, steps_per_epoch, callbacks
        strategy = model.distribute_strategy
        if not has(strategy, SchedulesSteps):
            raise TypeError(f"CoordinatedRunner needs a strategy that SchedulesSteps. Received: {strategy!r}")
        self.strategy = strategy
        self.coordinator = ClusterCoordinator(self.strategy)
        self._iterator = iter(self.coordinator.create_per_worker_dataset(stream))
        self._metrics = model.metrics
        self._warned_late_stop = False

    def _train_function(self, batches: Iterator[Any]) -> list[torch.Tensor]:
        batch = map_structure(_as_tensor, next(batches))  # numpy batches become tensors, as on the other paths
        model = self.model
        model.reset_metrics()
        model.module.train()
        # One step is one worker's batch: its global batch.
        self.strategy.run(step_function(model.train_step), args=(batch, batch_size_of(unpack(batch)[0])))
        return [v.detach().cpu().clone() for metric in self._metrics for v in metric.variables]

    def train_epoch(self, epoch: int, state: FitState) -> None:
        # The chief's position wins (a backup restored mid-epoch): every task must schedule the same steps.
        first = int(self.coordinator.share_from_chief(state.step if self.strategy.is_chief else None))
        results = [self.coordinator.schedule(self._train_function, args=(self._iterator,))
                   for _ in range(first, self.steps)]
        if self.strategy.is_chief:
            self._follow_steps(results, first, state)
        self.coordinator.join()
        self.strategy.pull_all()  # callbacks (checkpoints, exports) see the servers' values

    def _follow_steps(self, results: list[RemoteValue], first: int, state: FitState) -> None:
        """On the chief: each step's metric sums and batch hooks, in step order, as the steps complete."""
        callbacks = self.callbacks
        for step, result in enumerate(results, first):
            callbacks.call("on_train_batch_begin", step, None)
            _accumulate(self._metrics, [result.fetch()])  # waits for this step; later ones run on meanwhile
            state.step = step + 1
            if callbacks.wants("on_train_batch_end"):
                logs = LocalLogs(self.model)
                callbacks.call("on_train_batch_end", step, logs)
                logs.settle()
            if self.model.stop_training and not self._warned_late_stop:
                self._warned_late_stop = True
                # NOTE: the workers hold this epoch's steps already (they replay the chief's schedule calls), so a
                # stop asked for in a batch hook can only take effect at the epoch's end.
                warnings.warn(
                    f"model.stop_training was set in a batch hook at step {step}; under ParameterServerStrategy "
                    "the epoch's remaining steps are already scheduled on the workers, so training stops at the "
                    "end of this epoch.", stacklevel=2)

    def epoch_logs(self, validate: Validate | None) -> Logs:
        logs: Logs = {}
        if self.strategy.is_chief:
            logs = self.model.get_metrics_result()
            if validate is not None:
                logs.update(validate())
        # NOTE: the chief alone computes the epoch's logs; the workers take them from it, so their callbacks decide as
        # the chief's do (a restarted worker replaying epoch 0 would see other values if it evaluated for itself) and
        # no worker spends time on validation.
        return dict(self.coordinator.share_from_chief(logs if self.strategy.is_chief else None))

    def agree_on_stop(self) -> bool:
        # The chief's decision wins, so no task schedules an epoch the others skip.
        mine = bool(self.model.stop_training) if self.strategy.is_chief else None
        self.model.stop_training = bool(self.coordinator.share_from_chief(mine))
        return self.model.stop_training


def _accumulate(metrics: list[Metric], steps: list[list[np.ndarray]]) -> None:
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


__all__ = ["CoordinatedRunner", "FitInput", "LocalLogs", "LocalRunner", "Runner", "make_runner", "step_function"]
