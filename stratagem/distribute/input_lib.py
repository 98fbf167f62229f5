"""``DistributedDataset``: what ``experimental_distribute_dataset`` returns (TF's ``input_lib``).

Given GLOBAL batches, each replica gets its share of every batch, by the auto-shard policy (``Options``). ``DATA``
over a random-access pipeline ending in ``batch``: the replica computes only its own rows; otherwise every process
walks the same global batches and keeps its contiguous rows. Either state is the global position, so it restores
onto any number of workers. ``FILE``: each worker reads every N-th file, batched per replica; shards may differ in
length, so each step the workers agree (one small all-reduce) on who still has data, and one that ran out sends an
empty batch until all are done: no step hangs, every element counts once (its state restores only onto as many
workers). ``OFF``: every worker reads everything. Random choices use a seed the replicas agree on when iteration
starts; a short last batch splits as evenly as possible.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from stratagem._nest import batch_size_of, map_structure
from stratagem.data.dataset import Dataset
from stratagem.data.options import UNKNOWN_CARDINALITY
from stratagem.data.iterator import DatasetIterator, IterContext, Pending
from stratagem.data.ops.batch import BatchDataset, BatchIterator
from stratagem.data.ops.identity import ForwardingDataset
from stratagem.data.ops.prefetch import PrefetchDataset
from stratagem.distribute.input_context import InputContext, check_global_batch_size, replica_slice
from stratagem.errors import ConfigurationError

if TYPE_CHECKING:  # strategy.py imports this module
    from stratagem.distribute.strategy import Strategy


@dataclass(frozen=True)
class InputOptions:
    """How a distributed dataset feeds its replica (``tf.distribute.InputOptions``).

    Args:
        experimental_fetch_to_device: Batches arrive on the replica's device (default True, as in TF).
        experimental_replication_mode: ``"PER_WORKER"`` or ``"PER_REPLICA"``, the same here (a process is both).
        experimental_place_dataset_on_device: Not supported (the pipeline runs on the host); True raises.
        experimental_per_replica_buffer_size: Ignored with a warning: stratagem's look-ahead is its own.
    """

    experimental_fetch_to_device: bool = True
    experimental_replication_mode: str = "PER_WORKER"
    experimental_place_dataset_on_device: bool = False
    experimental_per_replica_buffer_size: int = 1


def check_input_options(options: Any) -> InputOptions:
    """``options`` validated (None gives the defaults); what cannot be honoured raises or warns."""
    if options is None:
        return InputOptions()
    if not isinstance(options, InputOptions):
        raise TypeError("options must be a stratagem.distribute.InputOptions (tf.distribute.InputOptions). "
                        f"Received: options of type {type(options).__name__}")
    mode = str(getattr(options.experimental_replication_mode, "value", options.experimental_replication_mode)).upper()
    if mode.rsplit(".", 1)[-1] not in ("PER_WORKER", "PER_REPLICA"):
        raise ValueError("experimental_replication_mode must be PER_WORKER or PER_REPLICA. "
                         f"Received: experimental_replication_mode={options.experimental_replication_mode!r}")
    if options.experimental_place_dataset_on_device:
        raise ValueError(
            "experimental_place_dataset_on_device=True is not supported: stratagem runs the input pipeline on the "
            "host and copies each batch to the device (experimental_fetch_to_device). Leave it False. "
            "Received: experimental_place_dataset_on_device=True")
    if options.experimental_per_replica_buffer_size != 1:
        warnings.warn("InputOptions.experimental_per_replica_buffer_size is ignored: stratagem prepares the next "
                      "batches ahead on its own. Received: experimental_per_replica_buffer_size="
                      f"{options.experimental_per_replica_buffer_size}", stacklevel=3)
    return options


class DistributedDataset:
    """Iterates this replica's batches; ``iter()`` starts a new epoch.

    Args:
        dataset: A ``stratagem.data.Dataset`` or any iterable of batches.
        input_context: This process's ``InputContext``.
        split_batches: Whether ``dataset`` yields global batches to split (``experimental_distribute_dataset``) or
            this replica's own (``distribute_datasets_from_function``).
        strategy: The strategy, for agreeing on seeds and on the end of uneven file shards; None for a single
            process.
        seed: Seed of the pipeline's unseeded random ops, the same on every replica; default: drawn on the chief at
            the first ``iter()`` and agreed by every replica. Kept in the ``seed`` attribute.
    """

    def __init__(self, dataset: Iterable[Any], *, input_context: InputContext, split_batches: bool,
                 strategy: Strategy | None = None, seed: int | None = None, options: InputOptions | None = None) -> None:
        self._options = options or InputOptions()
        self.seed = seed
        self._dataset = dataset
        self._context = input_context
        self._split = split_batches
        self._strategy = strategy
        self._epoch = 0

    def __iter__(self) -> DistributedIterator:
        return self.iterator()

    def iterator(self, epoch: int | None = None, *, seed: int | None = None) -> DistributedIterator:
        """A new iterator; ``epoch`` (default: the next one) picks the epoch's shuffle order.

        ``fit`` passes its own epoch number, so a restarted job shuffles epoch k as the uninterrupted job did,
        however many iterators it made before, and the seed its replicas agreed (``seed``, the same on every
        replica; default: the ``seed`` attribute, else one agreed now).
        """
        if epoch is None:
            epoch = self._epoch
        self._epoch = epoch + 1
        return DistributedIterator(self, epoch, seed)

    def __len__(self) -> int:
        return len(self._dataset)  # type: ignore[arg-type]

    def cardinality(self) -> int:
        """Global batches per pass: the dataset's ``cardinality()`` (``INFINITE_CARDINALITY`` if it repeats forever)."""
        if isinstance(self._dataset, Dataset):
            return self._dataset.cardinality()
        try:
            return len(self._dataset)  # type: ignore[arg-type]
        except TypeError:
            return UNKNOWN_CARDINALITY

    @property
    def element_spec(self) -> Any:
        """TF's ``element_spec`` of this replica's batches: the pipeline's ``(shape, dtype)`` pairs, batch size None.

        Raises:
            TypeError: If the input is a plain iterable (no spec to read).
        """
        if not isinstance(self._dataset, Dataset):
            raise TypeError("element_spec needs a stratagem.data.Dataset input. Received: "
                            f"{type(self._dataset).__name__}")
        return _unknown_batch_size(self._dataset.element_spec)

    def wants_lookahead(self) -> bool:
        """Whether producing batches ahead of the consumer pays: the pipeline asked for it.

        True for any pipeline that is not random-access (streaming sources, plain iterables such as a DataLoader)
        and for one with a ``prefetch`` anywhere. A random-access pipeline without one (in-memory arrays) gathers
        each batch with one index per component: a second thread would only cost its hand-off.
        """
        if not isinstance(self._dataset, Dataset) or self._dataset._length() is None:
            return True
        return _contains(self._dataset, PrefetchDataset)


class DistributedIterator:
    """This replica's batches, with ``get_state``/``set_state`` for Datasets."""

    def __init__(self, source: DistributedDataset, epoch: int, seed: int | None = None) -> None:
        self._source = source
        self._impl = _make_impl(source, epoch, seed)

    def __iter__(self) -> DistributedIterator:
        return self

    def __next__(self) -> Any:
        batch = next(self._impl)[0]
        device = getattr(self._source._strategy, "device", None)
        if self._source._options.experimental_fetch_to_device and device is not None and device.type != "cpu":
            batch = map_structure(lambda t: t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t, batch)
        return batch

    def get_next(self) -> Any:
        """TF's ``get_next()``: ``next(iterator)``."""
        return next(self)

    def get_next_as_optional(self) -> Optional:
        """TF's ``get_next_as_optional()``: the next batch, or an empty ``Optional`` at the end of the input."""
        try:
            return Optional(next(self))
        except StopIteration:
            return Optional()

    def next_with_info(self) -> tuple[Any, int, range]:
        """``(local batch, global batch size, global positions of the local rows)``."""
        return next(self._impl)

    @property
    def needs_main_thread(self) -> bool:
        """True if each step runs a collective (FILE shards agreeing on the end of data)."""
        return isinstance(self._impl, _FileShardWalk)

    def get_state(self) -> dict[str, Any]:
        return self._impl.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._impl.set_state(state)

    def close(self) -> None:
        self._impl.close()


_NO_VALUE = object()


class Optional:
    """``tf.experimental.Optional`` as ``get_next_as_optional`` returns it: a value, or none at the end of input."""

    def __init__(self, value: Any = _NO_VALUE) -> None:
        self._value = value

    def has_value(self) -> torch.Tensor:
        """A bool tensor, as in TF (``if not optional.has_value(): break`` works)."""
        return torch.tensor(self._value is not _NO_VALUE)

    def get_value(self) -> Any:
        """The value. Raises ``ValueError`` for an empty Optional (TF raises its InvalidArgumentError)."""
        if self._value is _NO_VALUE:
            raise ValueError("The Optional has no value: the input ended. Check has_value() before get_value().")
        return self._value


def _unknown_batch_size(spec: Any) -> Any:
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], tuple) and isinstance(spec[1], str):
        shape, dtype = spec  # one component's (shape, dtype): its batch dimension varies across replicas and steps
        return ((None, *shape[1:]) if shape else shape), dtype
    if isinstance(spec, dict):
        return {key: _unknown_batch_size(value) for key, value in spec.items()}
    if isinstance(spec, (tuple, list)):
        return type(spec)(_unknown_batch_size(value) for value in spec)
    return spec


def _make_impl(source: DistributedDataset, epoch: int, seed: int | None) -> Any:
    data, ctx, strategy = source._dataset, source._context, source._strategy
    if not isinstance(data, Dataset):
        return _Walk(iter(data), ctx, split=source._split)
    if seed is None and source.seed is None:
        # Agreed once (a collective, so every replica iterates in step), then reused:
        # later epochs differ by epoch number, as in a single process.
        source.seed = shared_seed(strategy)
    seed = seed if seed is not None else int(source.seed or 0)
    if not source._split:
        return _Walk(data.iterator(seed=seed, epoch=epoch), ctx, split=False)
    policy = resolve_policy(data)
    if policy == "file" and ctx.num_input_pipelines > 1 and strategy is not None:
        sharded = rebatch(shard_files(data, ctx.num_input_pipelines, ctx.input_pipeline_id), ctx.num_replicas_in_sync)
        return _FileShardWalk(sharded.iterator(seed=seed, epoch=epoch), ctx, strategy)
    if policy == "off":
        return _Walk(rebatch(data, ctx.num_replicas_in_sync).iterator(seed=seed, epoch=epoch), ctx, split=False)
    batched = _top_batch(data)
    if batched is not None and data._length() is not None:
        return _ReplicaRowsIterator(batched, ctx, data._context(seed=seed, epoch=epoch))
    return _Walk(data.iterator(seed=seed, epoch=epoch), ctx, split=True)


def resolve_policy(dataset: Any) -> str:
    """The auto-shard policy in force for ``dataset``, with AUTO resolved."""
    policy = str(getattr(dataset.options().experimental_distribute.auto_shard_policy, "value",
                         dataset.options().experimental_distribute.auto_shard_policy)).lower()
    if policy not in ("auto", "file", "data", "off"):
        raise ValueError(f"Unknown auto_shard_policy. Expected AUTO, FILE, DATA or OFF. Received: {policy!r}")
    if policy == "auto":
        return "file" if dataset._reads_files() else "data"
    return policy


def shared_seed(strategy: Strategy | None) -> int:
    """A seed drawn on the chief and agreed by every replica (one collective when distributed).

    Drawn from torch's RNG, so ``torch.manual_seed`` makes a run reproducible.
    """
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    if strategy is None or strategy.num_replicas_in_sync == 1:
        return seed
    mine = torch.tensor(float(seed) if strategy.is_chief else 0.0, dtype=torch.float64, device=strategy.device)
    return int(strategy.reduce("sum", mine, axis=None).item())


# ---- the ways of feeding a replica: each yields (local batch, global batch size, positions) ----
class _Walk:
    """Walks a stream of batches: global ones (``split``: this replica keeps its rows) or its own.

    Every process walks the same global batches, so the state (that of a Dataset's iterator) is valid for any number
    of workers.
    """

    def __init__(self, batches: Iterator[Any], ctx: InputContext, *, split: bool) -> None:
        self._batches, self._ctx, self._split, self._first, self._offset = batches, ctx, split, True, 0

    def __next__(self) -> tuple[Any, int, range]:
        batch = map_structure(_as_tensor, next(self._batches))
        size = batch_size_of(batch)
        if not self._split:
            return batch, size * self._ctx.num_replicas_in_sync, range(0)
        if self._first:
            # Only the first batch must divide; a short final batch is split as evenly as possible so no example is
            # dropped.
            check_global_batch_size(size, self._ctx.num_replicas_in_sync)
            self._first = False
        rows = replica_slice(size, self._ctx.num_replicas_in_sync, self._ctx.input_pipeline_id)
        offset, self._offset = self._offset, self._offset + size
        return map_structure(lambda t: t[rows], batch), size, range(offset + rows.start, offset + rows.stop)

    def _resumable(self) -> DatasetIterator:
        if not isinstance(self._batches, DatasetIterator):
            raise TypeError("A plain iterable has no saved position; use a stratagem.data.Dataset to checkpoint input.")
        return self._batches

    def get_state(self) -> dict[str, Any]:
        return {"global": self._resumable().get_state(), "offset": self._offset}

    def set_state(self, state: dict[str, Any]) -> None:
        self._resumable().set_state(state["global"])
        self._offset, self._first = int(state["offset"]), False

    def close(self) -> None:
        if isinstance(self._batches, DatasetIterator):
            self._batches.close()


class _FileShardWalk(_Walk):
    """FILE policy: every N-th file, per-replica batches, and a collective each step on the end of data."""

    def __init__(self, batches: Iterator[Any], ctx: InputContext, strategy: Strategy) -> None:
        super().__init__(batches, ctx, split=False)
        self._strategy = strategy
        self._template: Any = None

    def __next__(self) -> tuple[Any, int, range]:
        try:
            local = map_structure(_as_tensor, next(self._batches))
            self._template = local
        except StopIteration:
            local = None
        flags = torch.tensor([0.0 if local is None else 1.0, 0.0 if local is None else batch_size_of(local)],
                             dtype=torch.float64, device=self._strategy.device)
        have, global_size = self._strategy.reduce("sum", flags, axis=None).tolist()
        if have == 0:
            raise StopIteration
        if local is None:  # this shard ran out first: an empty share keeps the step in lockstep
            local = map_structure(lambda t: t[:0], self._template)
        return local, int(global_size), range(0)

    def get_state(self) -> dict[str, Any]:
        return {"file_shard": super().get_state(), "num_workers": self._ctx.num_input_pipelines}

    def set_state(self, state: dict[str, Any]) -> None:
        if int(state["num_workers"]) != self._ctx.num_input_pipelines:
            raise ConfigurationError(
                "A FILE-sharded input position can only be restored onto the same number of workers, since "
                "each worker's files depend on it. Use AutoShardPolicy.DATA to resume on another count. "
                f"Received: saved num_workers={state['num_workers']}, now={self._ctx.num_input_pipelines}")
        super().set_state(state["file_shard"])


class _ReplicaRowsIterator(BatchIterator):
    """A random-access pipeline ending in batch(B): computes only this replica's rows of each batch."""

    def __init__(self, batched: BatchDataset, ctx: InputContext, iter_ctx: IterContext) -> None:
        super().__init__(batched, iter_ctx)
        self._input_context = ctx
        if self._length is not None and self._length > 0:
            check_global_batch_size(len(batched.rows(0)), ctx.num_replicas_in_sync)

    def _submit(self, index: int) -> Pending:
        rows = self._dataset.rows(index)  # type: ignore[attr-defined]
        ctx = self._input_context
        mine = rows[replica_slice(len(rows), ctx.num_replicas_in_sync, ctx.input_pipeline_id)]
        parent = self._dataset._parents[0]
        if len(mine):
            pending = parent._submit_many(list(mine), self._ctx)
        else:  # a short last batch with fewer rows than replicas: an empty share of the right structure
            pending = parent._submit_many([rows[0]], self._ctx).then(lambda one: map_structure(lambda t: t[:0], one))
        return pending.then(lambda batch: (map_structure(_as_tensor, batch), len(rows), mine))

    def get_state(self) -> dict[str, Any]:
        return {"global_batch": self._index, "epoch": self._ctx.epoch, "seed": self._ctx.seed}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state({self._INDEX: state["global_batch"], self._EPOCH: state["epoch"], self._SEED: state["seed"]})


# ---- pipeline rewriting ----------------------------------------------------------
def _contains(dataset: Any, kind: type) -> bool:
    return isinstance(dataset, kind) or any(_contains(parent, kind) for parent in dataset._parents)


def _top_batch(dataset: Any) -> Any:
    while isinstance(dataset, ForwardingDataset):  # options, prefetch: the batch below decides
        dataset = dataset._parents[0]
    return dataset if isinstance(dataset, BatchDataset) and dataset._parents[0]._length() is not None else None


def rewrite(dataset: Any, replace: Callable[[Any], Any]) -> Any:
    """A copy of the pipeline where ``replace(node)`` (when not None) stands in for ``node``."""
    replacement = replace(dataset)
    if replacement is not None:
        return replacement
    if not dataset._parents:
        return dataset
    parents = tuple(rewrite(parent, replace) for parent in dataset._parents)
    if all(a is b for a, b in zip(parents, dataset._parents)):
        return dataset
    clone = copy.copy(dataset)
    clone._parents = parents
    return clone


def shard_files(dataset: Any, num_shards: int, index: int) -> Any:
    """The pipeline with its file source reading every ``num_shards``-th file."""
    out = rewrite(dataset, lambda node: node.with_files_shard(num_shards, index) if hasattr(node, "with_files_shard")
                  else None)
    if out is dataset:  # nothing was replaced: no node reads files
        raise ConfigurationError(
            "AutoShardPolicy.FILE needs a pipeline that reads files (list_files, TextLineDataset, TFRecordDataset, "
            "image_dataset_from_directory). Use AutoShardPolicy.DATA for in-memory data. Received: " + str(dataset))
    return out


def rebatch(dataset: Any, num_replicas: int) -> Any:
    """The pipeline with its last ``batch(B)`` replaced by ``batch(B / num_replicas)``."""
    done: list[Any] = []

    def replace(node: Any) -> Any:
        if done or not isinstance(node, BatchDataset):
            return None
        check_global_batch_size(node.batch_size, num_replicas)
        done.append(node)
        clone = copy.copy(node)
        clone.batch_size = node.batch_size // num_replicas
        return clone

    out = rewrite(dataset, replace)
    if not done:
        raise ConfigurationError(
            "Distributing this dataset needs it to end in batch(global_batch_size), so each replica can take "
            f"global_batch_size / num_replicas_in_sync. Add .batch(...). Received: {dataset}")
    return out


def _as_tensor(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        if value.dtype.kind == "f":
            # numpy's cast, not torch's .to(): that one fans out to torch's thread pool and competes with the training
            # step for the cores.
            value = value.astype(torch.empty((), dtype=torch.get_default_dtype()).numpy().dtype, copy=False)
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return _as_tensor(np.asarray(value))
    return value
