"""Turns what ``fit``/``evaluate``/``predict`` receive into this replica's batches.

Each adapter yields ``(local_batch, global_batch_size, positions)``: ``positions`` are the global indices of the
local rows (``predict`` uses them to put gathered outputs back in order). Every process walks the same global
batches in the same order, so the replicas always run the same number of steps and each example of a batch goes to
exactly one replica.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from stratagem._nest import batch_size_of, first_leaf, map_structure
from stratagem.data.dataset import Dataset
from stratagem.data.options import INFINITE_CARDINALITY
from stratagem.data.iterator import DatasetIterator
from stratagem.data.ops.prefetch import PrefetchIterator
from stratagem.distribute.input_context import InputContext, check_global_batch_size
from stratagem.distribute.input_lib import DistributedDataset, _as_tensor
from stratagem.distribute.strategy import Strategy
from stratagem.models.fit_arguments import check_steps

Batch = tuple[Any, int, Sequence[int]]  # (local batch, global batch size, global positions of its rows)


def array_dataset(data: Any, *, batch_size: int, shuffle: bool) -> Dataset:
    """In-memory arrays or tensors as the pipeline Keras builds for them: slices, shuffle, batch.

    A random-access pipeline ending in ``batch``, so each replica gathers only its rows of each global batch.
    """
    tensors = map_structure(_as_tensor, data)
    _check_same_length(tensors, batch_size_of(tensors))
    dataset = Dataset.from_tensor_slices(tensors)
    if shuffle:
        dataset = dataset.shuffle(len(dataset))  # a uniform permutation per epoch: only indices are held
    return dataset.batch(batch_size)


class DataAdapter:
    """This replica's batches of a ``fit``/``evaluate``/``predict`` input, through ``DistributedDataset``.

    Args:
        data: A ``Dataset`` of global batches (arrays become one through ``array_dataset``), any iterable of
            batches, or a ``DistributedDataset``.
        seed: Seed of the pipeline's unseeded random ops; the same on every replica.
        strategy: Splits each global batch among replicas; None: this process reads all.
        num_samples: Examples per pass, when known (the progress bar shows samples/s).
    """

    def __init__(self, data: Iterable[Any], *, seed: int, strategy: Strategy | None, num_samples: int | None = None,
                 batch_size: int | None = None) -> None:
        if isinstance(data, DistributedDataset):
            self.source = data
        elif strategy is not None:
            self.source = strategy.experimental_distribute_dataset(data)
        else:  # this process alone, over all the data
            self.source = DistributedDataset(data, input_context=InputContext(), split_batches=True, seed=seed)
        # The dataset's own seed, else the one the caller agreed: passed to each epoch's iterator, so iterating needs
        # no collective.
        self.seed = self.source.seed if self.source.seed is not None else seed
        self.num_samples, self.batch_size = num_samples, batch_size
        self._state: dict[str, Any] | None = None
        try:
            length = len(data)  # type: ignore[arg-type]
        except TypeError:
            length = None
        self.steps: int | None = length if length is not None and length >= 0 else None

    def position(self) -> dict[str, Any]:
        """The distributed iterator's state (Datasets only) and the agreed shuffle seed."""
        return {"seed": self.seed, "iterator": self._state}

    def restore(self, position: dict[str, Any]) -> None:
        if position.get("seed") is not None:
            self.seed = int(position["seed"])

    def epoch(self, epoch: int, resume: dict[str, Any] | None = None) -> Iterator[Batch]:
        # Made here, on the training thread: making it may agree on a seed, a collective.
        iterator = self.source.iterator(epoch=epoch, seed=self.seed)
        if resume is not None and resume.get("iterator") is not None:
            iterator.set_state(resume["iterator"])
        self._state = _state_of(iterator)
        steps: DatasetIterator = _Steps(iterator)
        # NOTE: fit's one look-ahead stage. A collective every step (uneven FILE shards) must stay on the training
        # thread, and so do pipelines that did not ask for look-ahead (in-memory arrays, where the hand-off costs more
        # than it saves); anything else is prefetched LOOKAHEAD steps ahead by a thread.
        if not iterator.needs_main_thread and self.source.wants_lookahead():
            steps = PrefetchIterator(steps, LOOKAHEAD, ram_budget=0)
        try:
            for item, state in steps:
                self._state = state  # the position after this batch, not after the look-ahead
                yield item
        finally:
            steps.close()


LOOKAHEAD = 3


class EpochFeeder:
    """Yields each epoch's batches; with ``steps_per_epoch``, one stream across epochs (Keras).

    As Keras 3's EpochIterator (tf.keras 2 stopped training instead): a pass that runs out mid-epoch ends that epoch
    early with Keras 3's warning and the next epoch starts a new pass; input that cannot start one (a spent generator)
    gives each later epoch no step and the warning again. Input that yields no batch at all raises ``ValueError``
    ("Expected input data to be non-empty."): training would silently do nothing.
    """

    def __init__(self, adapter: DataAdapter, steps_per_epoch: int | None, *, epochs: int) -> None:
        self.adapter, self.steps, self.epochs = adapter, steps_per_epoch, epochs
        self._seen_data = False  # a batch came, or a backup's position (taken after one) was restored
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
        self._seen_data = True

    def epoch(self, epoch: int) -> Iterator[Batch]:
        if self.steps is None:
            resume, self._resume = self._resume, None
            for item in self.adapter.epoch(epoch, resume=resume):
                self._seen_data = True
                yield item
            if not self._seen_data:
                raise _empty_input()
            return
        for step in range(self.steps):
            batch = self._next(first_of_epoch=step == 0)
            if batch is None:
                return
            yield batch

    def _next(self, *, first_of_epoch: bool) -> Batch | None:
        if self._stream is None:
            resume, self._resume = self._resume, None
            self._stream = self.adapter.epoch(self._passes, resume=resume)
        batch = next(self._stream, None)  # a step is a tuple, never None
        if batch is None and first_of_epoch and self._seen_data:
            # The last epoch used up its pass exactly: this epoch starts a new one, no warning (Keras 3).
            batch = self._new_pass()
        if batch is not None:
            self._seen_data = True
            return batch
        if not self._seen_data:
            raise _empty_input()
        # All replicas iterate the same global batches, so they run out together.
        warnings.warn(
            "Your input ran out of data; interrupting training. Make sure that your dataset or generator can "
            "generate at least `steps_per_epoch * epochs` batches. You may need to use the `.repeat()` function "
            "when building your dataset.", stacklevel=2,
        )
        self._stream = None  # this epoch ends early; the next one starts a new, reshuffled pass
        self._passes += 1
        return None

    def _new_pass(self) -> Batch | None:
        self._passes += 1
        self._stream = self.adapter.epoch(self._passes)
        return next(self._stream, None)


def _empty_input() -> ValueError:
    return ValueError(
        "Expected input data to be non-empty. fit received data that yields no batch, so there is nothing to "
        "train on. Check the dataset or generator (an exhausted generator, a filter that keeps nothing, or a "
        "batch with drop_remainder=True larger than the data).")


def _state_of(iterator: Any) -> dict[str, Any] | None:
    try:
        return iterator.get_state()
    except TypeError:  # a plain iterable: no position to save
        return None


class _Steps(DatasetIterator):
    """A distributed iterator's steps, each with the position after it, for a ``PrefetchIterator`` to hand over."""

    def __init__(self, iterator: Any) -> None:
        self._iterator = iterator

    def __next__(self) -> tuple[Batch, dict[str, Any] | None]:
        # Positions stay a range (or sequence): only predict turns them into a tensor.
        return self._iterator.next_with_info(), _state_of(self._iterator)

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        self._iterator.close()


def make_adapter(x: Any, y: Any, sample_weight: Any, *, batch_size: int | None, shuffle: bool, seed: int,
                 strategy: Strategy, local: bool = False) -> DataAdapter:
    """Picks the adapter for ``x`` (arrays/tensors, or an iterable of batches).

    ``seed`` must be the same on every replica. ``local``: this process alone reads all the data (evaluate/predict
    where steps are scheduled elsewhere).
    """
    if _holds_arrays(x):
        data = tuple(d for d in (x, y, sample_weight) if d is not None)
        data = data if len(data) > 1 else data[0]
        if batch_size is None:
            batch_size = 32  # Keras' default
        elif isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError("batch_size must be a positive integer: the number of examples in each batch. "
                             f"Received: batch_size={batch_size!r}")
        _check_sample_weight_shape(sample_weight, batch_size_of(data))
        if batch_size_of(data) == 0:
            raise ValueError(f"Expected input data to be non-empty. The arrays hold 0 examples. "
                             f"Received: x with shape {tuple(first_leaf(data).shape)}")
        if not local:  # raised here, before any step, with the fix
            check_global_batch_size(batch_size, strategy.num_replicas_in_sync)
        dataset = array_dataset(data, batch_size=batch_size, shuffle=shuffle)
        return DataAdapter(dataset, seed=seed, strategy=None if local else strategy, batch_size=batch_size,
                           num_samples=batch_size_of(data))
    check_batches_alone(x, y, sample_weight)
    if batch_size is not None:
        raise ValueError(
            "batch_size must not be given when x yields batches: the batches are already made. "
            f"Received: batch_size={batch_size}")
    if not isinstance(x, Iterable):
        raise TypeError(f"x must be arrays, tensors or an iterable of batches. Received: x of type {type(x).__name__}")
    return DataAdapter(x, seed=seed, strategy=None if local else strategy)


def check_batches_alone(x: Any, y: Any, sample_weight: Any) -> None:
    """Raises if ``y`` or ``sample_weight`` come beside an ``x`` that yields its own batches (Keras refuses both)."""
    if y is not None:
        raise ValueError(
            "y must be None when x is an iterable of batches (it yields (x, y) pairs itself). "
            f"Received: x of type {type(x).__name__}, y of type {type(y).__name__}")
    if sample_weight is not None:
        raise ValueError(
            "sample_weight must be None when x is a dataset or an iterable of batches, as in Keras: the weights "
            "would not follow the dataset's order. Put them in the batches instead, as (x, y, sample_weight), "
            f"e.g. Dataset.from_tensor_slices((x, y, w)). Received: x of type {type(x).__name__}, sample_weight "
            f"of type {type(sample_weight).__name__}")


def check_bounded(data: Any, *, steps: Any, steps_name: str) -> int | None:
    """``steps`` as Keras 3 reads it (0 is None: one whole pass); raises at once for endless ``data`` and no ``steps``.

    Raises:
        TypeError: If ``steps`` is not an int.
        ValueError: If ``steps`` is negative, or ``data`` has infinite cardinality and ``steps`` is None.
    """
    steps = check_steps(steps, steps_name=steps_name)
    cardinality = getattr(data, "cardinality", None)
    if steps is not None or not callable(cardinality) or cardinality() != INFINITE_CARDINALITY:
        return steps
    raise ValueError(
        f"The dataset repeats forever (repeat() with no count), so an epoch would never end. Pass "
        f"{steps_name}=N to make an epoch N batches, or repeat a finite number of times. "
        f"Received: {steps_name}=None, cardinality=INFINITE_CARDINALITY")


def unpack(data: Any) -> tuple[Any, Any, Any]:
    """Splits a batch into ``(x, y, sample_weight)`` as Keras does."""
    if not isinstance(data, (tuple, list)):
        return data, None, None
    if not 1 <= len(data) <= 3:
        raise ValueError(f"A batch must be x, (x,), (x, y) or (x, y, sample_weight). Received: a tuple of {len(data)}")
    padded = (*data, None, None)
    return padded[0], padded[1], padded[2]


def cast_inputs(x: Any, module: torch.nn.Module) -> Any:
    """Integer and bool inputs as the module's float dtype, as tf.keras casts inputs to its float32 ``Input``.

    A module with an ``Embedding`` takes integer indices, so its inputs stay as they are. Labels are never cast here.
    """
    leaves: list[Any] = []
    map_structure(leaves.append, x)
    if not any(isinstance(leaf, torch.Tensor) and not leaf.is_floating_point() and not leaf.is_complex()
               for leaf in leaves):
        return x
    if any(isinstance(layer, (torch.nn.Embedding, torch.nn.EmbeddingBag)) for layer in module.modules()):
        return x
    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
    return map_structure(lambda leaf: leaf.to(dtype) if isinstance(leaf, torch.Tensor) and not leaf.is_floating_point()
                         and not leaf.is_complex() else leaf, x)


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, torch.Tensor))


def _holds_arrays(x: Any) -> bool:
    """Arrays or tensors, alone or in a tuple, list or dict (``x`` as Keras takes it), not batches."""
    return _is_array(x) or (isinstance(x, (tuple, list, dict)) and _is_array(_first(x)))


def _first(structure: Any) -> Any:
    return next(iter(structure.values())) if isinstance(structure, dict) else (structure[0] if structure else None)


def _check_sample_weight_shape(sample_weight: Any, examples: int) -> None:
    # The loss is one value per example (extra axes averaged first), so a weight is one per example.
    shape = tuple(getattr(sample_weight, "shape", ()))
    if sample_weight is None or not _is_array(sample_weight) or shape in ((examples,), (examples, 1)):
        return
    raise ValueError(
        f"sample_weight holds one weight per example: shape ({examples},) or ({examples}, 1) for {examples} "
        "examples; the loss is averaged over any other axes before it is weighted. Pass one weight per example. "
        f"Received: sample_weight.shape={shape}")


def _check_same_length(data: Any, expected: int) -> None:
    lengths: list[int] = []
    map_structure(lambda t: lengths.append(int(t.shape[0])), data)
    if any(length != expected for length in lengths):
        raise ValueError(
            f"x, y and sample_weight must have the same number of examples (first axis). Received: lengths={lengths}")


def split_and_weight(x: Any, y: Any, sample_weight: Any, *, validation_split: float, validation_data: Any,
                     class_weight: Mapping[int, float] | None) -> tuple[Any, Any, Any, Any]:
    """Keras 3's preparation of ``fit``'s arrays: ``(x, y, sample_weight, validation_data)`` to train on.

    ``validation_split`` (without ``validation_data``) takes the LAST fraction of the arrays, before any shuffling;
    ``class_weight`` then becomes the training examples' sample weights.

    Raises:
        ValueError: If ``validation_split`` is not in [0, 1), not over arrays, or leaves one side empty; if
            ``class_weight`` comes with ``sample_weight`` (Keras 3 refuses both) or with input that is not arrays.
    """
    if not 0.0 <= validation_split < 1.0:
        raise ValueError(f"validation_split must be a float in [0, 1). Received: validation_split={validation_split!r}")
    if validation_split and validation_data is None:
        (x, y, sample_weight), validation_data = _split_last(x, y, sample_weight, validation_split)
    if class_weight is not None and isinstance(x, Dataset):  # Keras 3 maps a dataset's (x, y) batches
        x = x.map(lambda *batch: _with_class_weight(batch, class_weight))
    elif class_weight is not None:
        sample_weight = _class_weight_to_sample_weight(y, sample_weight, class_weight)
        _warn_unused_classes(y, class_weight)
    return x, y, sample_weight, validation_data


def _split_last(x: Any, y: Any, sample_weight: Any, validation_split: float) -> tuple[tuple[Any, Any, Any], tuple]:
    if not _holds_arrays(x):
        raise ValueError(
            "Argument `validation_split` is only supported for tensors or NumPy arrays: a dataset or generator has no "
            f"last fraction to set apart. Pass validation_data instead. Received: x of type {type(x).__name__}")
    total = batch_size_of(x)
    split_at = int(math.floor(total * (1.0 - validation_split)))  # Keras' rounding
    if split_at in (0, total):
        raise ValueError(
            f"Training data contains {total} samples, which is not sufficient to split it into a validation and "
            f"training set as specified by `validation_split={validation_split}`. Provide more data, or a "
            f"different validation_split. Received: num_samples={total}, validation_split={validation_split}")

    def part(data: Any, rows: slice) -> Any:
        return None if data is None else map_structure(lambda t: t[rows], data)

    train = tuple(part(d, slice(None, split_at)) for d in (x, y, sample_weight))
    validation = tuple(part(d, slice(split_at, None)) for d in (x, y, sample_weight))
    return train, tuple(d for d in validation if d is not None)


def _with_class_weight(batch: tuple, class_weight: Mapping[int, float]) -> tuple:
    x, y, sample_weight = unpack(batch)
    return x, y, torch.from_numpy(_class_weight_to_sample_weight(y, sample_weight, class_weight))


def _class_weight_to_sample_weight(y: Any, sample_weight: Any, class_weight: Mapping[int, float]) -> np.ndarray:
    if sample_weight is not None:
        raise ValueError(
            "You cannot `class_weight` and `sample_weight` at the same time (Keras 3 refuses it too). Fold the "
            "class weights into sample_weight yourself. Received: class_weight and sample_weight")
    if not _is_array(y):
        raise ValueError(
            "class_weight needs the labels as one array (a single output), in y or in a Dataset's (x, y) "
            f"batches. Received: y of type {type(y).__name__}")
    return np.array([class_weight.get(int(c), 1.0) for c in _label_classes(y)], dtype=np.float32)


def _label_classes(y: Any) -> np.ndarray:
    """Each example's class id, as Keras 3 reads labels for class_weight."""
    labels = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if labels.ndim > 1:  # one-hot (argmax), or one label per row in a last axis of 1
        labels = labels.argmax(axis=-1) if labels.shape[-1] > 1 else labels.squeeze(-1)
    return np.round(labels).astype(np.int64).reshape(-1)


def _warn_unused_classes(y: Any, class_weight: Mapping[int, float]) -> None:
    # NOTE: Keras 3 ignores a class_weight key that no label holds (tf.keras 2 refused keys other than 0..n-1); the
    # numbers follow Keras 3, and the warning says the weight has no effect.
    present = set(np.unique(_label_classes(y)).tolist())
    unused = sorted(int(key) for key in class_weight if int(key) not in present)
    if unused:
        warnings.warn(
            f"class_weight gives a weight to class(es) {unused}, which no training label holds, so it has no "
            "effect (Keras 3 ignores it too). class_weight keys are the labels' class ids, from 0; check them "
            f"against the labels. Received: class_weight keys={sorted(class_weight)}, label classes="
            f"{sorted(present)}", stacklevel=4)


def worker_stream(x: Any, y: Any, sample_weight: Any, *, batch_size: int, shuffle: bool) -> Callable[[Any], Iterator[Any]]:
    """What ``create_per_worker_dataset`` calls on each worker of a coordinated fit: an endless iterator of batches.

    The arrays reshuffled each pass (seeded by the worker's index), a dataset repeated, or ``x(input_context)`` for a
    function (TF's ``DatasetCreator``).
    """

    if not callable(x) and not _holds_arrays(x):
        check_batches_alone(x, y, sample_weight)

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
    arrays = tuple(a for a in (x, y, sample_weight) if a is not None)
    count = batch_size_of(map_structure(_as_tensor, arrays))
    if count < batch_size:
        raise ValueError(f"fit needs at least one full batch: {count} examples, batch_size={batch_size}.")
    # The engine's pipeline with full batches only (a stream has no last batch), reshuffled each pass; seeded by the
    # worker's index so workers read different orders.
    dataset = Dataset.from_tensor_slices(map_structure(_as_tensor, arrays))
    if shuffle:
        dataset = dataset.shuffle(count, seed=seed)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    epoch = 0
    while True:
        yield from dataset.iterator(seed=seed, epoch=epoch)
        epoch += 1
