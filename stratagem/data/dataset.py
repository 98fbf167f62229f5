"""``Dataset``: tf.data's pipeline language over numpy arrays and torch tensors.

Every method returns a new node; nothing runs until the dataset is iterated.
Nodes come in two kinds, and the difference is what makes pipelines
resumable and shardable:

- **Random-access** nodes (``from_tensor_slices``, ``range``, ``map``,
  ``batch``, ``shuffle`` and ``repeat`` over random-access parents, ``take``,
  ``skip``, ``shard``, ``enumerate``, ``zip``, ``concatenate``, ``window``) can produce
  element ``i`` directly. Their iterator's state is one index, restoring is
  O(1), and a distributed dataset computes only the rows of each global batch
  that its replica needs.
- **Streaming** nodes (``from_generator``, ``TextLineDataset``, ``TFRecordDataset``, ``filter``,
  ``interleave``, ``flat_map``, ``scan``, ``rebatch``, ``group_by_window``,
  ``sample_from_datasets``, ``choose_from_datasets``, ``ignore_errors``,
  ``shuffle`` over a streaming parent) produce elements in order; their
  state nests their parent's, and restoring may replay.

Ops live one per module in ``stratagem.data.ops``; this module holds the
fluent API and the static constructors.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from stratagem._nest import map_structure
from stratagem.data._eager import EagerIterator, eager_element, tf_numpy_value
from stratagem.data._structure import spec_of, stack, to_numpy
from stratagem.data.iterator import DatasetIterator, IndexIterator, IterContext, Pending
from stratagem.data.options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Options
from stratagem.data.seed import default_seed


class Dataset(abc.ABC):
    """A node of an input pipeline; iterate it for elements (``iter(ds)`` starts a new epoch)."""

    def __init__(self, *parents: Dataset) -> None:
        self._parents = parents
        self._options: Options = parents[0]._options if parents else Options()
        for other in parents[1:]:  # as tf.data: every input's options, later inputs winning a conflict
            self._options = self._options.merge(other._options)
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

    def _expect_order(self, order: np.ndarray, ctx: IterContext) -> None:
        """A hint: this pass will fetch positions ``order`` (int64), in that order; nodes above pass it on mapped.

        A filling in-memory cache computes its elements in chunks along it (``ops/cache.py``); others ignore it.
        """

    def _rows_independent(self, ctx: IterContext) -> bool:
        """Whether each row of ``_get_many`` is what ``_get`` gives, whatever rows are fetched together and in
        whatever order: deterministic, no row reading another and no random state drawn (False unless known)."""
        return False

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        return IndexIterator(self, ctx) if self._length() is not None else self._streaming_iterator(ctx)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        """The iterator when the node is streaming (``_length()`` is None)."""
        raise TypeError(f"{type(self).__name__} is neither random-access nor streaming: implement _make_iterator")

    def _reads_files(self) -> bool:
        """True if the pipeline's source is a list of files (the ``AUTO`` policy then shards files)."""
        return any(parent._reads_files() for parent in self._parents)

    # ---- iteration -------------------------------------------------------------
    def __iter__(self) -> DatasetIterator:
        """A new iterator whose elements also have TF's ``numpy()`` (``for elem in dataset: elem.numpy()``)."""
        return EagerIterator(self.iterator())

    def iterator(self, *, seed: int | None = None, epoch: int | None = None) -> DatasetIterator:
        """A new iterator; ``seed`` seeds random ops given no seed (every worker must pass the same)."""
        if epoch is None:
            epoch, self._epochs_started = self._epochs_started, self._epochs_started + 1
        if seed is None:
            # Drawn once per dataset: epochs then differ by epoch number only, so
            # reshuffle_each_iteration=False really repeats the order.
            if self._default_seed is None:
                self._default_seed = default_seed()  # reproducible after set_seed, as TF's global seed
            seed = self._default_seed
        return self._make_iterator(self._context(seed=seed, epoch=epoch))

    def _context(self, *, seed: int, epoch: int) -> IterContext:
        """The context of an iterator of this pipeline: seed, epoch and the pipeline-wide switches of its options."""
        return IterContext(seed=seed, epoch=epoch,
                           map_vectorization=self._options.experimental_optimization.map_vectorization)

    def as_numpy_iterator(self) -> Iterable[Any]:
        """Iterates the elements as TF's ``as_numpy_iterator`` gives them, structure kept.

        A 0-d leaf is a numpy scalar (``np.int64(3)``: hashable, so ``set(...)``
        works), a 0-d string is Python ``bytes`` (``line.decode()``), and a
        batch of strings an ``object`` array of ``bytes``; other leaves are arrays.
        """
        return (map_structure(_tf_numpy_leaf, to_numpy(element)) for element in self.iterator())

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
        """The pipeline's options, read-only (assigning raises, as in TF 2.21; use ``with_options``)."""
        view = self.__dict__.get("_options_view")
        if view is None or view[0] is not self._options:
            self._options_view = (self._options, self._options.read_only())
        return self._options_view[1]  # type: ignore[no-any-return]

    def with_options(self, options: Options) -> Dataset:
        """Returns this dataset with ``options`` merged into its options (the options it set win)."""
        return OptionsDataset(self, options)

    # ---- sources -----------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per row of ``tensors`` (arrays, tensors, tuples or dicts of them)."""
        return TensorSliceDataset(tensors)

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """A dataset of exactly one element, ``tensors``."""
        return TensorDataset(tensors)

    @staticmethod
    def range(*args: int) -> Dataset:
        """``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)`` as int64 scalars."""
        return RangeDataset(*args)

    @staticmethod
    def from_generator(generator: Callable[..., Iterable[Any]], output_types: Any = None, output_shapes: Any = None,
                       args: Sequence[Any] | None = None, output_signature: Any = None, name: str | None = None) -> Dataset:
        """Elements of ``generator(*args)``, called anew for every epoch (TF's arguments; see ``GeneratorDataset``)."""
        return GeneratorDataset(generator, output_signature, output_types=output_types, output_shapes=output_shapes,
                                args=args)

    @staticmethod
    def zip(*args: Any, datasets: Any = None) -> Dataset:
        """The i-th elements of datasets nested in tuples and dicts, in that structure; ends with the shortest.

        ``zip(a, b)`` and ``zip((a, b))`` give ``(a_i, b_i)``; ``zip((a, {"y": b}))`` gives ``(a_i, {"y": b_i})``.
        """
        if datasets is not None and args:
            raise TypeError(f"zip takes the datasets positionally or as datasets=, not both. Received: {len(args)} "
                            "positional arguments and datasets=...")
        return ZipDataset(datasets if datasets is not None else args[0] if len(args) == 1 else args)

    @staticmethod
    def list_files(file_pattern: str | Sequence[str], shuffle: bool | None = None, seed: int | None = None) -> Dataset:
        """File names matching a glob pattern, sorted (shuffled unless ``shuffle=False``, as in tf.data)."""
        return ListFilesDataset(file_pattern, shuffle=True if shuffle is None else shuffle, seed=seed)

    @staticmethod
    def sample_from_datasets(datasets: Sequence[Dataset], weights: Sequence[float] | None = None,
                             seed: int | None = None, stop_on_empty_dataset: bool = False,
                             rerandomize_each_iteration: bool | None = None) -> Dataset:
        """Each element from one of ``datasets``, drawn at random with probability ``weights`` (uniform if None).

        An input that ends is dropped (the others' weights renormalised) unless
        ``stop_on_empty_dataset``, which ends the whole dataset; see
        ``SampleFromDatasetsDataset``.
        """
        return SampleFromDatasetsDataset(datasets, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration)

    @staticmethod
    def choose_from_datasets(datasets: Sequence[Dataset], choice_dataset: Dataset,
                             stop_on_empty_dataset: bool = True) -> Dataset:
        """Element ``k`` from ``datasets[c_k]``, ``c_k`` the ``k``-th int64 of ``choice_dataset``."""
        return ChooseFromDatasetsDataset(datasets, choice_dataset, stop_on_empty_dataset)

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
        return MapDataset(self, map_func, num_parallel_calls=num_parallel_calls, deterministic=deterministic,
                          vectorized=vectorized)

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """Keeps the elements for which ``predicate`` is true."""
        return FilterDataset(self, predicate)

    def shuffle(self, buffer_size: int, seed: int | None = None, reshuffle_each_iteration: bool = True) -> Dataset:
        """Shuffles elements (a uniform permutation when the input is random-access)."""
        return shuffle_dataset(self, buffer_size, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration)

    def batch(self, batch_size: int, drop_remainder: bool = False, num_parallel_calls: int | None = None,
              deterministic: bool | None = None) -> Dataset:
        """Stacks ``batch_size`` consecutive elements along a new axis 0."""
        return BatchDataset(self, batch_size, drop_remainder=drop_remainder)

    def unbatch(self) -> Dataset:
        """Splits each element along axis 0 into its rows."""
        return UnbatchDataset(self)

    def padded_batch(self, batch_size: int, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False) -> Dataset:
        """Like ``batch``, padding each component to the longest in the batch (or ``padded_shapes``)."""
        return PaddedBatchDataset(self, batch_size, padded_shapes=padded_shapes, padding_values=padding_values,
                                  drop_remainder=drop_remainder)

    def repeat(self, count: int | None = None) -> Dataset:
        """Repeats the dataset ``count`` times (forever if None or -1), reshuffling each pass."""
        return RepeatDataset(self, count)

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all if -1)."""
        return TakeDataset(self, count)

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (none if -1)."""
        return SkipDataset(self, count)

    def cache(self, filename: str = "") -> Dataset:
        """Keeps elements after the first pass, in memory or (``filename``) on disk."""
        return CacheDataset(self, filename)

    def prefetch(self, buffer_size: int) -> Dataset:
        """Produces up to ``buffer_size`` elements ahead in a background thread (``AUTOTUNE`` sizes it)."""
        return PrefetchDataset(self, buffer_size)

    def interleave(self, map_func: Callable[..., Dataset], cycle_length: int | None = None, block_length: int = 1,
                   num_parallel_calls: int | None = None, deterministic: bool | None = None) -> Dataset:
        """Maps each element to a dataset and interleaves ``cycle_length`` of them, ``block_length`` at a time."""
        return InterleaveDataset(self, map_func, cycle_length=cycle_length, block_length=block_length,
                                 num_parallel_calls=num_parallel_calls, deterministic=deterministic)

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Every ``num_shards``-th element, starting at ``index``."""
        return ShardDataset(self, num_shards, index)

    def enumerate(self, start: int = 0) -> Dataset:
        """``(i, element)`` pairs, ``i`` an int64 counting from ``start``."""
        return ZipDataset((CounterDataset(start), self))

    def concatenate(self, dataset: Dataset) -> Dataset:
        """This dataset's elements, then ``dataset``'s."""
        return ConcatenateDataset(self, dataset)

    def flat_map(self, map_func: Callable[..., Dataset]) -> Dataset:
        """Maps each element to a dataset (tuples unpacked) and yields their elements in order."""
        return FlatMapDataset(self, map_func)

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any]) -> Any:
        """Folds the elements into one value: ``state = reduce_func(state, element)`` from ``initial_state``."""
        return eager_element(reduce_dataset(self, initial_state, reduce_func))  # with numpy(), as TF's tensor

    def scan(self, initial_state: Any, scan_func: Callable[[Any, Any], Any]) -> Dataset:
        """Yields ``output`` of ``state, output = scan_func(state, element)``, the state carried along."""
        return ScanDataset(self, initial_state, scan_func)

    def window(self, size: int, shift: int | None = None, stride: int = 1, drop_remainder: bool = False) -> Dataset:
        """Windows of ``size`` elements, every ``shift`` elements, each a dataset (per component of the element)."""
        return WindowDataset(self, size, shift, stride, drop_remainder)

    def rebatch(self, batch_size: int | Sequence[int], drop_remainder: bool = False) -> Dataset:
        """The rows of this dataset's batches regrouped into batches of ``batch_size`` (sizes used in turn)."""
        return RebatchDataset(self, batch_size, drop_remainder)

    def group_by_window(self, key_func: Callable[..., Any], reduce_func: Callable[[Any, Dataset], Dataset],
                        window_size: int | None = None,
                        window_size_func: Callable[[Any], Any] | None = None) -> Dataset:
        """Groups elements by ``key_func`` into windows and yields ``reduce_func(key, window)``'s elements."""
        return GroupByWindowDataset(self, key_func, reduce_func, window_size, window_size_func)

    def bucket_by_sequence_length(self, element_length_func: Callable[..., Any], bucket_boundaries: Sequence[int],
                                  bucket_batch_sizes: Sequence[int], padded_shapes: Any = None,
                                  padding_values: Any = None, pad_to_bucket_boundary: bool = False,
                                  no_padding: bool = False, drop_remainder: bool = False) -> Dataset:
        """Batches elements of similar length together (one batch size per length bucket), padding each batch."""
        return bucket_by_sequence_length(self, element_length_func, bucket_boundaries, bucket_batch_sizes,
                                         padded_shapes=padded_shapes, padding_values=padding_values,
                                         pad_to_bucket_boundary=pad_to_bucket_boundary, no_padding=no_padding,
                                         drop_remainder=drop_remainder)

    def snapshot(self, path: str, compression: str | None = "AUTO", reader_func: Callable[..., Any] | None = None,
                 shard_func: Callable[..., Any] | None = None) -> Dataset:
        """Writes the first complete pass under directory ``path``; later passes and runs read it back."""
        return SnapshotDataset(self, path, compression, reader_func, shard_func)

    def ignore_errors(self, log_warning: bool = False) -> Dataset:
        """Drops the elements whose production raised (logging each if ``log_warning``)."""
        return IgnoreErrorsDataset(self, log_warning)

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


# The ops subclass Dataset, so they are imported once it is defined; its methods construct them.
from stratagem.data.ops.batch import BatchDataset  # noqa: E402
from stratagem.data.ops.bucket_by_sequence_length import bucket_by_sequence_length  # noqa: E402
from stratagem.data.ops.cache import CacheDataset  # noqa: E402
from stratagem.data.ops.choose_from_datasets import ChooseFromDatasetsDataset  # noqa: E402
from stratagem.data.ops.concatenate import ConcatenateDataset  # noqa: E402
from stratagem.data.ops.counter import CounterDataset  # noqa: E402
from stratagem.data.ops.files import ListFilesDataset  # noqa: E402
from stratagem.data.ops.filter import FilterDataset  # noqa: E402
from stratagem.data.ops.flat_map import FlatMapDataset  # noqa: E402
from stratagem.data.ops.generator import GeneratorDataset  # noqa: E402
from stratagem.data.ops.group_by_window import GroupByWindowDataset  # noqa: E402
from stratagem.data.ops.ignore_errors import IgnoreErrorsDataset  # noqa: E402
from stratagem.data.ops.identity import OptionsDataset  # noqa: E402
from stratagem.data.ops.interleave import InterleaveDataset  # noqa: E402
from stratagem.data.ops.map import MapDataset  # noqa: E402
from stratagem.data.ops.padded_batch import PaddedBatchDataset  # noqa: E402
from stratagem.data.ops.prefetch import PrefetchDataset  # noqa: E402
from stratagem.data.ops.rebatch import RebatchDataset  # noqa: E402
from stratagem.data.ops.reduce import reduce_dataset  # noqa: E402
from stratagem.data.ops.repeat import RepeatDataset  # noqa: E402
from stratagem.data.ops.sample_from_datasets import SampleFromDatasetsDataset  # noqa: E402
from stratagem.data.ops.scan import ScanDataset  # noqa: E402
from stratagem.data.ops.shard import ShardDataset  # noqa: E402
from stratagem.data.ops.shuffle import shuffle_dataset  # noqa: E402
from stratagem.data.ops.snapshot import SnapshotDataset  # noqa: E402
from stratagem.data.ops.sources import RangeDataset, TensorDataset, TensorSliceDataset  # noqa: E402
from stratagem.data.ops.take_skip import SkipDataset, TakeDataset  # noqa: E402
from stratagem.data.ops.unbatch import UnbatchDataset  # noqa: E402
from stratagem.data.ops.window import WindowDataset  # noqa: E402
from stratagem.data.ops.zip import ZipDataset  # noqa: E402


def _tf_numpy_leaf(leaf: Any) -> Any:
    """One leaf of ``as_numpy_iterator`` as TF 2.21 gives it (checked against TF: scalars, bytes, object strings)."""
    return tf_numpy_value(leaf) if isinstance(leaf, np.ndarray) else leaf  # else bytes already
