"""``Dataset``: tf.data's pipeline language over numpy arrays and torch tensors.

Every method returns a new node; nothing runs until the dataset is iterated.
Nodes come in two kinds, and the difference is what makes pipelines
resumable and shardable:

- **Random-access** nodes (``from_tensor_slices``, ``range``, ``map``,
  ``batch``, ``shuffle`` and ``repeat`` over random-access parents, ``take``,
  ``skip``, ``shard``, ``enumerate``, ``zip``, ``concatenate``) can produce
  element ``i`` directly. Their iterator's state is one index, restoring is
  O(1), and a distributed dataset computes only the rows of each global batch
  that its replica needs.
- **Streaming** nodes (``from_generator``, ``TextLineDataset``, ``filter``,
  ``interleave``, ``shuffle`` over a streaming parent) produce elements in
  order; their state nests their parent's, and restoring may replay.

Ops live one per module in ``stratagem.data.ops``; this module holds the
fluent API and the static constructors.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from stratagem.data._structure import spec_of, stack, to_numpy
from stratagem.data.iterator import DatasetIterator, IndexIterator, IterContext, Pending
from stratagem.data.options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Options


class Dataset(abc.ABC):
    """A node of an input pipeline; iterate it for elements (``iter(ds)`` starts a new epoch)."""

    def __init__(self, *parents: Dataset) -> None:
        self._parents = parents
        self._options: Options = parents[0]._options if parents else Options()
        self._epochs_started = 0
        self._default_seed: int | None = None

    # ---- what a node implements ----------------------------------------------
    def _length(self) -> int | None:
        """Elements per pass if random-access (``INFINITE_CARDINALITY`` if endless), else None."""
        return None

    def _get(self, index: int, ctx: IterContext) -> Any:
        raise TypeError(f"{self} is not random-access")

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        """Elements at ``indices``, stacked along axis 0 (nodes override with a vectorised path)."""
        return stack([self._get(i, ctx) for i in indices])

    def _submit_many(self, indices: Sequence[int], ctx: IterContext) -> Pending:
        """Starts fetching ``_get_many(indices)``; nodes that can work ahead (parallel maps) begin now."""
        return Pending(lambda: self._get_many(indices, ctx))

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is None:
            raise TypeError(f"{type(self).__name__} is neither random-access nor streaming: implement _make_iterator")
        return IndexIterator(self, ctx)

    def _reads_files(self) -> bool:
        """True if the pipeline's source is a list of files (the ``AUTO`` policy then shards files)."""
        return any(parent._reads_files() for parent in self._parents)

    # ---- iteration -------------------------------------------------------------
    def __iter__(self) -> DatasetIterator:
        return self.iterator()

    def iterator(self, *, seed: int | None = None, epoch: int | None = None) -> DatasetIterator:
        """A new iterator; ``seed`` seeds random ops given no seed (every worker must pass the same)."""
        if epoch is None:
            epoch, self._epochs_started = self._epochs_started, self._epochs_started + 1
        if seed is None:
            # Drawn once per dataset: epochs then differ by epoch number only, so
            # reshuffle_each_iteration=False really repeats the order.
            if self._default_seed is None:
                self._default_seed = int(np.random.SeedSequence().generate_state(1)[0])
            seed = self._default_seed
        return self._make_iterator(IterContext(seed=seed, epoch=epoch))

    def as_numpy_iterator(self) -> Iterable[Any]:
        """Iterates the elements as numpy arrays."""
        return (to_numpy(element) for element in self)

    def cardinality(self) -> int:
        """Number of elements, ``INFINITE_CARDINALITY`` (-1) or ``UNKNOWN_CARDINALITY`` (-2)."""
        length = self._length()
        return UNKNOWN_CARDINALITY if length is None else length

    def __len__(self) -> int:
        length = self.cardinality()
        if length < 0:
            raise TypeError(f"The dataset length is {'infinite' if length == INFINITE_CARDINALITY else 'unknown'}.")
        return length

    @property
    def element_spec(self) -> Any:
        """``(shape, dtype)`` of each component of one element (computed from the first element)."""
        iterator = self.iterator(seed=0, epoch=0)
        try:
            return spec_of(next(iterator))
        finally:
            iterator.close()

    def options(self) -> Options:
        return self._options

    def with_options(self, options: Options) -> Dataset:
        """Returns this dataset with ``options`` attached."""
        from stratagem.data.ops.identity import OptionsDataset

        return OptionsDataset(self, options)

    # ---- sources -----------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per row of ``tensors`` (arrays, tensors, tuples or dicts of them)."""
        from stratagem.data.ops.sources import TensorSliceDataset

        return TensorSliceDataset(tensors)

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """A dataset of exactly one element, ``tensors``."""
        from stratagem.data.ops.sources import TensorDataset

        return TensorDataset(tensors)

    @staticmethod
    def range(*args: int) -> Dataset:
        """``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)`` as int64 scalars."""
        from stratagem.data.ops.sources import RangeDataset

        return RangeDataset(*args)

    @staticmethod
    def from_generator(generator: Callable[[], Iterable[Any]], output_signature: Any = None) -> Dataset:
        """Elements of ``generator()``, called anew for every epoch."""
        from stratagem.data.ops.generator import GeneratorDataset

        return GeneratorDataset(generator, output_signature)

    @staticmethod
    def zip(*datasets: Dataset | tuple[Dataset, ...]) -> Dataset:
        """Tuples of the i-th elements of each dataset; ends with the shortest."""
        from stratagem.data.ops.zip import ZipDataset

        flat = datasets[0] if len(datasets) == 1 and isinstance(datasets[0], tuple) else datasets
        return ZipDataset(tuple(flat))  # type: ignore[arg-type]

    @staticmethod
    def list_files(file_pattern: str | Sequence[str], shuffle: bool | None = None, seed: int | None = None) -> Dataset:
        """File names matching a glob pattern, sorted (shuffled unless ``shuffle=False``, as in tf.data)."""
        from stratagem.data.ops.files import ListFilesDataset

        return ListFilesDataset(file_pattern, shuffle=True if shuffle is None else shuffle, seed=seed)

    # ---- transformations -------------------------------------------------------
    def map(self, map_func: Callable[..., Any], num_parallel_calls: int | None = None, deterministic: bool | None = None,
            *, vectorized: bool = False) -> Dataset:
        """Applies ``map_func`` to each element (tuple elements are unpacked into arguments).

        Args:
            map_func: The function.
            num_parallel_calls: ``None`` for one call at a time, an int, or
                ``AUTOTUNE``; parallel calls run in worker processes, so
                Python code that holds the GIL runs in parallel too.
            deterministic: Keep input order (default True; ``False`` lets a
                slow element be overtaken).
            vectorized: stratagem extension: ``map_func`` works on a batch of
                elements as well as on one, so a following ``batch`` may call
                it once per batch (an order of magnitude faster for numpy code).
        """
        from stratagem.data.ops.map import MapDataset

        return MapDataset(self, map_func, num_parallel_calls=num_parallel_calls, deterministic=deterministic,
                          vectorized=vectorized)

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """Keeps the elements for which ``predicate`` is true."""
        from stratagem.data.ops.filter import FilterDataset

        return FilterDataset(self, predicate)

    def shuffle(self, buffer_size: int, seed: int | None = None, reshuffle_each_iteration: bool = True) -> Dataset:
        """Shuffles elements (a uniform permutation when the input is random-access)."""
        from stratagem.data.ops.shuffle import shuffle_dataset

        return shuffle_dataset(self, buffer_size, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration)

    def batch(self, batch_size: int, drop_remainder: bool = False, num_parallel_calls: int | None = None,
              deterministic: bool | None = None) -> Dataset:
        """Stacks ``batch_size`` consecutive elements along a new axis 0."""
        from stratagem.data.ops.batch import BatchDataset

        return BatchDataset(self, batch_size, drop_remainder=drop_remainder)

    def unbatch(self) -> Dataset:
        """Splits each element along axis 0 into its rows."""
        from stratagem.data.ops.unbatch import UnbatchDataset

        return UnbatchDataset(self)

    def padded_batch(self, batch_size: int, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False) -> Dataset:
        """Like ``batch``, padding each component to the longest in the batch (or ``padded_shapes``)."""
        from stratagem.data.ops.padded_batch import PaddedBatchDataset

        return PaddedBatchDataset(self, batch_size, padded_shapes=padded_shapes, padding_values=padding_values,
                                  drop_remainder=drop_remainder)

    def repeat(self, count: int | None = None) -> Dataset:
        """Repeats the dataset ``count`` times (forever if None or -1), reshuffling each pass."""
        from stratagem.data.ops.repeat import RepeatDataset

        return RepeatDataset(self, count)

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all if -1)."""
        from stratagem.data.ops.take_skip import TakeDataset

        return TakeDataset(self, count)

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (none if -1)."""
        from stratagem.data.ops.take_skip import SkipDataset

        return SkipDataset(self, count)

    def cache(self, filename: str = "") -> Dataset:
        """Keeps elements after the first pass, in memory or (``filename``) on disk."""
        from stratagem.data.ops.cache import CacheDataset

        return CacheDataset(self, filename)

    def prefetch(self, buffer_size: int) -> Dataset:
        """Produces up to ``buffer_size`` elements ahead in a background thread (``AUTOTUNE`` sizes it)."""
        from stratagem.data.ops.prefetch import PrefetchDataset

        return PrefetchDataset(self, buffer_size)

    def interleave(self, map_func: Callable[..., Dataset], cycle_length: int | None = None, block_length: int = 1,
                   num_parallel_calls: int | None = None, deterministic: bool | None = None) -> Dataset:
        """Maps each element to a dataset and interleaves ``cycle_length`` of them, ``block_length`` at a time."""
        from stratagem.data.ops.interleave import InterleaveDataset

        return InterleaveDataset(self, map_func, cycle_length=cycle_length, block_length=block_length,
                                 num_parallel_calls=num_parallel_calls, deterministic=deterministic)

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Every ``num_shards``-th element, starting at ``index``."""
        from stratagem.data.ops.shard import ShardDataset

        return ShardDataset(self, num_shards, index)

    def enumerate(self, start: int = 0) -> Dataset:
        """``(i, element)`` pairs."""
        from stratagem.data.ops.zip import ZipDataset

        return ZipDataset((Dataset.range(start, np.iinfo(np.int64).max), self))

    def concatenate(self, dataset: Dataset) -> Dataset:
        """This dataset's elements, then ``dataset``'s."""
        from stratagem.data.ops.concatenate import ConcatenateDataset

        return ConcatenateDataset(self, dataset)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """Returns ``transformation_func(self)``."""
        return transformation_func(self)

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        inner = f" <- {self._parents[0]}" if self._parents else ""
        return f"{type(self).__name__}{inner}"


def _check_positive(name: str, value: int, *, allow_autotune: bool = False) -> None:
    if allow_autotune and value == AUTOTUNE:
        return
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer{' or AUTOTUNE' if allow_autotune else ''}. Received: {name}={value!r}")

