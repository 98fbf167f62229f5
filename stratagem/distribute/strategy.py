"""The ``Strategy`` base class: the tf.distribute surface, written once.

A replica is a process (as in torch DDP): ``run`` calls ``fn`` once, for this process's replica, and cross-replica
work goes through ``_all_reduce``. Subclasses implement only the underscore hooks, never the public methods.
"""

from __future__ import annotations

import abc
import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from stratagem._nest import map_structure
from stratagem.distribute import collectives, context
from stratagem.distribute.capabilities import (
    AgreesThroughStore, AppliesUpdates, NeedsCoordinator, StrategyOptimizer, has,
)
from stratagem.distribute.cluster import ClusterResolver
from stratagem.distribute.input_context import InputContext
from stratagem.distribute.input_lib import DistributedDataset, InputOptions, check_input_options
from stratagem.distribute.values import PerReplica, ReduceOp, ValueContext, unwrap

T = TypeVar("T")


class Strategy(abc.ABC):
    """Decides where replicas run and how their state is kept in sync.

    Build and compile models inside a concrete strategy's ``scope()``; ``Model.fit`` then trains on every replica.
    """

    def __init__(self, *, cluster_resolver: ClusterResolver | None = None) -> None:
        self._cluster_resolver = cluster_resolver
        self._num_replicas = 1
        self._replica_id = 0
        self._device = torch.device("cpu")
        self._setup()
        if self._num_replicas > 1:
            context.note_distributed(self)
            _guard_keras_loops()

    # ---- public, TF-shaped -------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        """Number of replicas that take part in every step."""
        return self._num_replicas

    @property
    def cluster_resolver(self) -> ClusterResolver | None:
        """The ``ClusterResolver`` this strategy was built from, if any."""
        return self._cluster_resolver

    @property
    def replica_id_in_sync_group(self) -> int:
        """Index of this process's replica, in ``[0, num_replicas_in_sync)``."""
        return self._replica_id

    @property
    def device(self) -> torch.device:
        """The device this process's replica computes on."""
        return self._device

    @property
    def is_chief(self) -> bool:
        """True on the one replica that writes files (checkpoints, logs, exports)."""
        return self._is_chief()

    @contextlib.contextmanager
    def scope(self) -> Iterator[Strategy]:
        """Makes this the current strategy: models built inside use it.

        Keras objects made in the scope of several replicas behave as TF's do (``models.keras_internals``):
        trainable variables start from the chief's values, and metrics read outside ``run`` give the value over
        every replica.
        """
        if self._num_replicas > 1:
            from stratagem.models.keras_internals import install_replica_hooks

            install_replica_hooks()  # nothing unless the program imported Keras
            _guard_keras_loops()
        context.push(self)
        try:
            with _keras_device(self._device):
                yield self
        finally:
            context.pop(self)

    def run(self, fn: Callable[..., T], args: tuple = (), kwargs: dict | None = None) -> T:
        """Calls ``fn(*args, **kwargs)`` once, for this process's replica.

        ``PerReplica`` arguments are unwrapped to this replica's value. ``fn`` runs in this strategy's replica
        context: ``get_strategy()`` returns it, a Keras optimizer's ``apply_gradients`` sums gradients across
        replicas, as in TF, and Keras makes its tensors (an optimizer's slots built at its first step) on the
        replica's device.
        """
        if has(self, NeedsCoordinator):
            self.check_can_run()  # steps run where a coordinator schedules them (ParameterServer)
        args = tuple(a.value if isinstance(a, PerReplica) else a for a in args)
        kwargs = {k: (v.value if isinstance(v, PerReplica) else v) for k, v in (kwargs or {}).items()}
        # A collective failing inside fn (DDP's gradient all-reduce, a reduce) names this call, the rank and host.
        with collectives.call_errors("strategy.run"), \
                collectives.collective_errors("a collective in fn", timeout_s=None), context.replica_context(self), \
                _keras_device(self._device):
            return fn(*args, **kwargs)

    def reduce(self, reduce_op: ReduceOp | str, value: Any, axis: int | None = None) -> Any:
        """Combines ``value`` (a tensor, ``PerReplica``, number, or nested structure of them) across replicas.

        With an ``axis``, along it first: ``MEAN`` then averages over every element of that axis on every replica
        (weighting each replica by its element count), as ``tf.distribute.Strategy.reduce`` does.

        Example:
            >>> total = strategy.reduce("sum", per_replica_loss, axis=None)  # doctest: +SKIP
        """
        op = ReduceOp.parse(reduce_op)
        if isinstance(value, (dict, list, tuple)):  # a nested structure of values, as TF's reduce takes
            return map_structure(lambda leaf: self.reduce(op, leaf, axis), value)
        tensor = unwrap(value)
        if axis is None:
            out = self._all_reduce(tensor, ReduceOp.SUM if op is ReduceOp.MEAN else op)
            return out / self._num_replicas if op is ReduceOp.MEAN else out
        if op in (ReduceOp.SUM, ReduceOp.MEAN):
            local_sum = tensor.sum(dim=axis)
            if op is ReduceOp.SUM:
                return self._all_reduce(local_sum, ReduceOp.SUM)
            count = torch.tensor(float(tensor.shape[axis]), dtype=local_sum.dtype, device=local_sum.device)
            packed = self._all_reduce(torch.cat([local_sum.reshape(-1), count.reshape(1)]), ReduceOp.SUM)
            return (packed[:-1] / packed[-1]).reshape(local_sum.shape)
        local = tensor.amax(dim=axis) if op is ReduceOp.MAX else tensor.amin(dim=axis)
        return self._all_reduce(local, op)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """The values of ``value`` held by this process, one per local replica: one, since a replica is a process.

        Example:
            >>> strategy.experimental_local_results(strategy.run(step, args=(batch,)))  # doctest: +SKIP
            (tensor(0.3120),)
        """
        return (value.value,) if isinstance(value, PerReplica) else (value,)

    def experimental_distribute_values_from_function(self, value_fn: Callable[[ValueContext], Any]) -> PerReplica:
        """This replica's ``value_fn(ValueContext(...))``, as a ``PerReplica`` that ``run`` unwraps.

        Example:
            >>> values = strategy.experimental_distribute_values_from_function(
            ...     lambda ctx: ctx.replica_id_in_sync_group * 10)  # doctest: +SKIP
        """
        return PerReplica(value_fn(ValueContext(self.replica_id_in_sync_group, self.num_replicas_in_sync)))

    def gather(self, value: torch.Tensor | PerReplica, axis: int = 0) -> torch.Tensor:
        """Concatenates every replica's ``value`` along ``axis``, in replica order.

        Lengths along ``axis`` may differ (the last batch of an epoch); the other dimensions must match.
        """
        tensor = unwrap(value)
        if self._num_replicas == 1:
            return tensor
        moved = tensor.movedim(axis, 0)
        sizes = torch.zeros(self._num_replicas, dtype=torch.float64, device=tensor.device)
        sizes[self._replica_id] = moved.shape[0]
        counts: list[int] = self._all_reduce(sizes, ReduceOp.SUM).long().tolist()
        # All-reduce of zero-padded slots: each replica writes only its own rows, so the sum is the concatenation.
        # Uses the one collective every strategy has.
        offset = sum(counts[: self._replica_id])
        buffer = torch.zeros((sum(counts), *moved.shape[1:]), dtype=moved.dtype, device=moved.device)
        buffer[offset : offset + moved.shape[0]] = moved
        return self._all_reduce(buffer, ReduceOp.SUM).movedim(0, axis)

    def metric_result(self, metric: Any) -> torch.Tensor:
        """``metric.result()`` over every replica's updates, as TF reads a metric made in ``scope()``.

        A custom loop updates its metrics inside ``run``, so each replica holds its own sums (``metric.variables``);
        this sums them in one all-reduce, reads ``result()`` and leaves the metric's state as it was. Call it on
        every replica at the same point.

        Example:
            >>> strategy.run(train_step, args=(batch,))  # updates train_accuracy  # doctest: +SKIP
            >>> print(float(strategy.metric_result(train_accuracy)))  # doctest: +SKIP
        """
        return read_summed(self, list(metric.variables), metric.result)

    def any_replica(self, flags: Sequence[bool]) -> list[bool]:
        """For each flag, whether some replica holds it: the same answer on every replica (a collective).

        ``Model.fit`` calls it once at its start, so replicas whose callbacks differ (a progress bar or checkpoints
        on the chief only) still make the same collectives at every step.
        """
        if self._num_replicas == 1:
            return list(flags)
        if has(self, AgreesThroughStore):
            agreed = self.agree_through_store(list(flags))
            if agreed is not None:
                return agreed
        bits = torch.tensor([float(flag) for flag in flags], device=self._device)
        return [bool(value) for value in self._all_reduce(bits, ReduceOp.MAX).tolist()]

    def experimental_distribute_dataset(self, dataset: Iterable[Any],
                                        options: InputOptions | None = None) -> DistributedDataset:
        """Splits each global batch of ``dataset`` into this replica's share.

        Every process iterates the same global batches (the ``DATA`` policy) and keeps its contiguous rows, so each
        example of a batch goes to exactly one replica.
        """
        return DistributedDataset(dataset, input_context=self._input_context(), split_batches=True, strategy=self,
                                  options=check_input_options(options))

    def distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], Iterable[Any]],
                                          options: InputOptions | None = None) -> DistributedDataset:
        """Calls ``dataset_fn(input_context)`` to build this replica's own pipeline.

        Its dataset must already yield per-replica batches: use ``input_context.get_per_replica_batch_size`` and
        shard by ``input_context.input_pipeline_id``.
        """
        ctx = self._input_context()
        return DistributedDataset(dataset_fn(ctx), input_context=ctx, split_batches=False, strategy=self,
                                  options=check_input_options(options))

    def distribute_module(self, module: nn.Module) -> nn.Module:
        """Returns ``module`` placed on this replica's device with gradients kept in sync (for custom training loops).

        ``Model.fit`` does this itself. Backward through it SUMS gradients across replicas, so scale each replica's
        loss with ``stratagem.nn.compute_average_loss``.
        """
        return self._wrap_module(module)

    def distribute_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer | StrategyOptimizer:
        """Returns ``optimizer`` as this strategy steps it, for custom training loops.

        Unchanged under the all-reduce strategies, which sum gradients in backward; strategies that apply updates
        themselves (``AppliesUpdates``) return a wrapper whose ``step()`` does their update.

        Example:
            >>> optimizer = strategy.distribute_optimizer(torch.optim.SGD(net.parameters(), lr=0.1))  # doctest: +SKIP
        """
        if has(self, AppliesUpdates):
            return self.wrap_optimizer(optimizer)
        return optimizer

    # ---- what a subclass implements ----------------------------------------
    @abc.abstractmethod
    def _setup(self) -> None:
        """Sets ``_num_replicas``, ``_replica_id`` and ``_device``; joins the process group."""

    @abc.abstractmethod
    def _wrap_module(self, module: nn.Module) -> nn.Module:
        """Places ``module`` and returns what the training step should call."""

    @abc.abstractmethod
    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        """Returns ``op`` (SUM, MAX or MIN) of ``tensor`` over every replica."""

    @abc.abstractmethod
    def _input_context(self) -> InputContext:
        """The ``InputContext`` of this process's input pipeline."""

    def _is_chief(self) -> bool:
        return self._replica_id == 0

    def _teardown(self) -> None:
        """Releases the process group; the default strategy has none."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_replicas_in_sync={self._num_replicas}, device={self._device})"


def read_summed(strategy: Strategy | None, states: list[torch.Tensor], read: Callable[[], T]) -> T:
    """``read()`` while ``states`` hold their sums over every replica (one all-reduce); the states are put back after.

    How metrics, whose states are sums, give the result of every replica's updates: a collective, so every replica
    calls it at the same point. ``strategy=None``: this replica's.
    """
    if strategy is None or strategy.num_replicas_in_sync == 1 or not states:
        return read()
    local = [state.detach().clone() for state in states]
    packed = collectives.flatten(states, dtype=torch.float64, device=strategy.device)
    summed = strategy.reduce(ReduceOp.SUM, packed, axis=None)
    try:
        collectives.unflatten_into(summed, states)  # the global sums, for read() to see
        # A result may be a state itself (a sum metric's result() returns its total): copy it before the put-back.
        return map_structure(lambda leaf: leaf.clone() if isinstance(leaf, torch.Tensor) else leaf, read())
    finally:
        for state, value in zip(states, local):
            state.copy_(value)


def _guard_keras_loops() -> None:
    # NOTE: Keras's own fit/evaluate/predict know nothing of this strategy and would train each replica alone:
    # while it exists they refuse with the fix (stratagem/models/keras_internals.py). Keras imported later is
    # guarded at the next scope() entry.
    if "keras" in sys.modules:
        from stratagem.models.keras_internals import guard_keras_loops

        guard_keras_loops()


def _keras_device(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    # NOTE: Keras's torch backend makes its variables and tensors on the GPU whenever there is one; Keras objects
    # built in this scope are made on this strategy's device instead (a CPU strategy on a GPU machine).
    if "keras" not in sys.modules:
        return contextlib.nullcontext()
    from stratagem.models.keras_internals import keras_device

    return keras_device(device)
