"""``CacheDataset``: elements kept after one full pass, in memory or in ``.npz`` files.

The first complete pass over the parent is recorded; every later pass (a new
``iter()``) reads the recording instead of running the parent. As in tf.data,
a pass that stops early records nothing, and upstream randomness is frozen:
every pass repeats the recorded order. The recorded pass is always the
parent's epoch 0 under the iterator's seed, so a lost in-memory cache is
rebuilt identically when a position is restored in a new process.

On disk (``filename`` not empty) elements go to ``<filename>.<n>.npz`` chunk
files of plain numpy arrays, never pickles, plus ``<filename>.index.json``
holding the count and the element structure (dicts, tuples, torch or
numpy leaves). Chunks are written to temporary names while the pass runs and
renamed into place, then the index, only when the pass completes: an index
file means a complete cache. Files are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import socket
import threading
import uuid
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stratagem._nest import map_structure
from stratagem._process import keep_freed_memory
from stratagem.data._structure import gather_rows, stack, take_rows
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops._cache_columns import FILL_ROWS, OrderedFill, copy_rows, empty_columns, is_permutation
from stratagem._disk_full import raise_if_disk_full
from stratagem.data.options import INFINITE_CARDINALITY
from stratagem.errors import CheckpointError

_CHUNK_SIZE = 256
_INDEX_VERSION = 1
_MAX_OPEN_CHUNKS = 16


class CacheDataset(Dataset):
    """Records the first full pass and replays it; see ``Dataset.cache``.

    Over a random-access parent the cache is random-access too: the first
    element asked for fills the whole cache (one pass over the parent), and
    every element then comes from it; a reader that announced its order (a
    ``batch``, through a ``shuffle``) gets its batches while the in-memory
    cache fills along that order, where the parent's rows allow it
    (``_cache_columns.py``). Over an endless parent nothing can be recorded
    and elements come from the parent.

    Args:
        parent: The input dataset.
        filename: ``""`` to cache in memory, else the path prefix of the cache
            files. An existing complete cache with that prefix is reused, as
            in tf.data; give each pipeline (and each worker) its own prefix.

    Raises:
        TypeError: If ``filename`` is not a string or path; while filling, if an
            element holds object arrays or dicts with non-string keys.
        CheckpointError: While reading, if a cache file is corrupt or partially
            written (the message names the file to delete).

    Example:
        >>> ds = Dataset.range(3).map(lambda x: x * 2).cache()
        >>> [int(x) for x in ds] == [int(x) for x in ds]  # the second pass reads the cache
        True
    """

    def __init__(self, parent: Dataset, filename: str | os.PathLike[str] = "") -> None:
        super().__init__(parent)
        if not isinstance(filename, (str, os.PathLike)):
            raise TypeError(f"cache filename must be a str or path. Received: filename of type {type(filename).__name__}")
        self.filename = os.fspath(filename)
        self._store_parent: Dataset | None = None
        self._store_obj: _MemoryStore | _FileStore | None = None

    def store(self) -> _MemoryStore | _FileStore:
        """Where elements are kept; a copy of this node with another parent gets its own."""
        if self._store_obj is None or self._store_parent is not self._parents[0]:
            self._store_obj = _MemoryStore() if self.filename == "" else _FileStore(self.filename)
            self._store_parent = self._parents[0]
        return self._store_obj

    def _length(self) -> int | None:
        return self._parents[0]._length()

    def _get(self, index: int, ctx: IterContext) -> Any:
        if self._length() == INFINITE_CARDINALITY:  # an endless pass never completes: nothing to cache
            return self._parents[0]._get(index, ctx)
        store = self.store()
        if not store.is_complete():
            self.fill(ctx)
        return store.get(index)

    def fill(self, ctx: IterContext) -> None:
        """Records a whole pass of the parent (its epoch 0 under ``ctx.seed``)."""
        store, ctx = self.store(), ctx.at(seed=ctx.seed, epoch=0)
        if isinstance(store, _MemoryStore) and store.fill_columns(self._parents[0], ctx):
            return
        writer = store.writer()
        iterator = self._parents[0]._make_iterator(ctx)
        try:
            for element in iterator:
                writer.append(element)
            writer.commit(ctx.seed)
        finally:
            writer.abort()
            iterator.close()

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        store = self.store()
        if self._length() == INFINITE_CARDINALITY or not isinstance(store, _MemoryStore):
            return super()._get_many(indices, ctx)
        elements = store.take_planned(indices, ctx)
        if elements is not None:
            return elements
        if not store.is_complete():
            self.fill(ctx)
        return store.get_many(indices)

    def _expect_order(self, order: np.ndarray, ctx: IterContext) -> None:
        store = self.store()
        if self._length() != INFINITE_CARDINALITY and isinstance(store, _MemoryStore):
            store.expect_order(self._parents[0], ctx.at(seed=ctx.seed, epoch=0), order)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _CacheIterator(self, ctx)

    def __str__(self) -> str:
        return f"CacheDataset({self.filename!r}) <- {self._parents[0]}"


class _CacheIterator(DatasetIterator):
    """Fills the cache while passing the parent through, or reads a complete cache."""

    _MODE = "mode"
    _POSITION = "position"
    _FILL, _READ = "fill", "read"

    def __init__(self, dataset: CacheDataset, ctx: IterContext) -> None:
        self._dataset = dataset
        self._parent: DatasetIterator | None = None
        self._writer: _MemoryWriter | _FileWriter | None = None
        self._position = 0
        self._ctx = ctx
        self._start(self._READ if dataset.store().is_complete() else self._FILL, ctx.seed, parent_state=None)

    def _start(self, mode: str, seed: int, parent_state: dict[str, Any] | None) -> None:
        self.close()
        self._mode, self._seed = mode, seed
        if mode == self._READ:
            return
        self._parent = self._dataset._parents[0]._make_iterator(self._ctx.at(seed=seed, epoch=0))
        if parent_state is not None:
            self._parent.set_state(parent_state)
        # NOTE: a pass restored mid-way lacks the elements before the restore point (a state holds no
        # elements), so it passes the parent through without recording; the next full pass records.
        self._writer = self._dataset.store().writer() if self._position == 0 else None

    def __next__(self) -> Any:
        if self._mode == self._READ:
            store = self._dataset.store()
            if self._position >= len(store):
                raise StopIteration
            element = store.get(self._position)
        else:
            assert self._parent is not None
            try:
                element = next(self._parent)
            except StopIteration:
                if self._writer is not None:
                    self._writer.commit(self._seed)
                    self._writer = None
                raise
            if self._writer is not None:
                self._writer.append(element)
        self._position += 1
        return element

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {self._MODE: self._mode, self._POSITION: self._position}
        if self._mode == self._READ:
            seed = self._dataset.store().seed
            state[self._SEED] = self._seed if seed is None else seed
        else:
            assert self._parent is not None
            state[self._SEED], state[self._PARENT] = self._seed, self._parent.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        mode, seed = str(state[self._MODE]), int(state[self._SEED])
        if mode not in (self._FILL, self._READ):
            raise ValueError(f"Unknown cache iterator mode. Expected 'fill' or 'read'. Received: mode={mode!r}")
        self._position = int(state[self._POSITION])
        if mode == self._READ and not self._dataset.store().is_complete():
            self._dataset.fill(self._ctx.at(seed=seed, epoch=0))  # e.g. an in-memory cache restored in a new process
        self._start(mode, seed, parent_state=state.get(self._PARENT))

    def close(self) -> None:
        writer, self._writer = getattr(self, "_writer", None), None
        parent, self._parent = getattr(self, "_parent", None), None
        if writer is not None:
            writer.abort()
        if parent is not None:
            parent.close()


class _MemoryStore:
    """Elements in a list, as produced; or, filled from a random-access parent, as columns.

    Columns: one array (or tensor) per leaf with every element's row, filled
    ``FILL_ROWS`` elements at a time by the parent's batched fetch (a
    vectorised map runs once per chunk); a batch of cached elements is then one
    gather per leaf instead of a stack of element objects. Filled in index
    order, row ``i`` is element ``i``; filled along a reader's announced order
    (``_cache_columns.OrderedFill``), ``_slots[i]`` is element ``i``'s row.
    """

    def __init__(self) -> None:
        self._elements: list[Any] | None = None
        self._columns: Any = None
        self._slots: np.ndarray | None = None
        self._num_rows = 0
        self.seed: int | None = None
        self._plan: OrderedFill | None = None
        self._plan_decided = False  # whether the plan's parent was found to have independent rows
        self._no_columns = False  # a fill into columns failed: elements go to the list
        self._lock = threading.RLock()  # one fill at a time: iterators of one pipeline may run in several threads

    def is_complete(self) -> bool:
        return self._elements is not None or self._columns is not None

    def __len__(self) -> int:
        return self._num_rows if self._columns is not None else len(self._elements or ())

    def get(self, index: int) -> Any:
        if self._columns is not None:
            if not 0 <= index < self._num_rows:
                raise IndexError(f"cache index out of range. Received: index={index}, num_elements={self._num_rows}")
            return take_rows(self._columns, index if self._slots is None else int(self._slots[index]))
        assert self._elements is not None
        return self._elements[index]

    def get_many(self, indices: Sequence[int]) -> Any:
        if self._columns is None:
            return stack([self.get(i) for i in indices])
        rows = np.asarray(indices, dtype=np.int64)
        if self._slots is not None:
            rows = self._slots[rows]
        return gather_rows(self._columns, rows)

    def expect_order(self, parent: Dataset, ctx: IterContext, order: np.ndarray) -> None:
        """Plans the fill along ``order`` (the positions a reader will fetch) if it covers every element once."""
        with self._lock:
            length = parent._length()
            if (self.is_complete() or self._plan is not None or length is None
                    or not is_permutation(order, length)):
                return
            self._plan, self._plan_decided = OrderedFill(parent, ctx, order, length), False

    def take_planned(self, indices: Sequence[int], ctx: IterContext) -> Any | None:
        """The elements at ``indices`` from the planned fill; None where there is none or they are off its order."""
        if self._plan is None:
            return None
        with self._lock:
            plan = self._plan
            if plan is None or not self._decide(plan):
                return None
            try:
                elements = plan.take(indices, ctx)
                if elements is None:  # off the order (another reader): the rest is filled now, then read
                    plan.finish()
            except ValueError:  # elements that do not fit columns: the fill in index order decides what to keep
                self._plan = None
                return None
            if plan.complete:
                self._complete_from(plan)
            if elements is None or plan.all_served:
                self._plan = None  # later fetches read the columns
            return elements

    def _decide(self, plan: OrderedFill) -> bool:
        """Whether the plan may run: the parent's rows must be independent of fetching (else the fill in index order).

        A map decides at its first batch call, so the fill's first chunk in index order, the one the fill
        without a plan computes first, runs before the question is asked; if the answer is no, that fill goes
        on from it (each element is computed once, in the order it always was).
        """
        if self._plan_decided:
            return True
        keep_freed_memory()  # see fill_columns
        parent, ctx = plan._parent, plan.ctx
        first = None
        if not parent._rows_independent(ctx):
            length = parent._length()
            assert length is not None
            try:
                first = parent._get_many(range(0, min(length, FILL_ROWS)), ctx)
            except ValueError:  # elements of different shapes do not stack: the list keeps them as they are
                self._plan, self._no_columns = None, True
                return False
            if not parent._rows_independent(ctx):
                self._plan = None
                self.fill_columns(parent, ctx, first=first)
                return False
        self._plan_decided = True
        return True

    def fill_columns(self, parent: Dataset, ctx: IterContext, *, first: Any = None) -> bool:
        """Fills the columns from ``parent``'s pass under ``ctx``; False (nothing kept) where it cannot.

        A planned fill (``expect_order``) is finished instead where it runs; ``first`` is the first chunk,
        computed already.
        """
        with self._lock:
            if self._plan is not None and self._plan_decided:
                plan, self._plan = self._plan, None
                try:
                    plan.finish()
                except ValueError:  # as in index order: elements that do not fit columns go to the list
                    return False
                self._complete_from(plan)
                return True
            self._plan = None
            if self._no_columns:
                return False
            self._no_columns = not self._fill_in_index_order(parent, ctx, first)
            return not self._no_columns

    def _complete_from(self, plan: OrderedFill) -> None:
        if not self.is_complete():  # another pass may have completed first; it wins
            self._slots = plan.slots()
            self._columns, self._num_rows, self.seed = plan.columns, len(self._slots), plan.ctx.seed

    def _fill_in_index_order(self, parent: Dataset, ctx: IterContext, first: Any) -> bool:
        length = parent._length()
        if length is None or length <= 0:
            return False
        # Each chunk's map allocates and frees the same large temporaries: keep them for reuse (no fresh pages),
        # as fit does for its steps.
        keep_freed_memory()
        columns: Any = None
        for start in range(0, length, FILL_ROWS):
            stop = min(length, start + FILL_ROWS)
            try:
                chunk = first if start == 0 and first is not None else parent._get_many(range(start, stop), ctx)
            except ValueError:  # elements of different shapes do not stack: the list keeps them as they are
                return False
            if columns is None:
                columns = empty_columns(chunk, length)
                if columns is None:
                    return False
            if not copy_rows(columns, chunk, start, stop):
                return False
        if not self.is_complete():  # another pass may have completed first; it wins
            self._columns, self._num_rows, self.seed = columns, length, ctx.seed
        return True

    def writer(self) -> _MemoryWriter:
        return _MemoryWriter(self)


class _MemoryWriter(list):
    """The elements of the pass being recorded; ``commit`` hands them to the store."""

    def __init__(self, store: _MemoryStore) -> None:
        super().__init__()
        self._store = store

    def commit(self, seed: int) -> None:
        if not self._store.is_complete():  # another pass may have completed first; it wins
            self._store._elements, self._store.seed = list(self), seed

    def abort(self) -> None:
        self.clear()


class _FileStore:
    """Elements in ``<prefix>.<n>.npz`` chunks described by ``<prefix>.index.json``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.index_path = f"{prefix}.index.json"
        self._index: dict[str, Any] | None = None
        self._open: collections.OrderedDict[int, Any] = collections.OrderedDict()

    @property
    def seed(self) -> int | None:
        return None if self._index is None else self._index["seed"]

    def chunk_path(self, chunk: int) -> str:
        return f"{self.prefix}.{chunk}.npz"

    def is_complete(self) -> bool:
        if self._index is None and os.path.exists(self.index_path):
            self._index = _read_index(self.index_path)
        return self._index is not None

    def __len__(self) -> int:
        return 0 if self._index is None else int(self._index["num_elements"])

    def get(self, index: int) -> Any:
        assert self._index is not None
        if not 0 <= index < len(self):
            raise IndexError(f"cache index out of range. Received: index={index}, num_elements={len(self)}")
        chunk, offset = divmod(index, int(self._index["chunk_size"]))
        path = self.chunk_path(chunk)
        try:
            npz = self._chunk(chunk, path)
            arrays = [npz[f"{offset}_{leaf}"] for leaf in range(self._index["num_leaves"])]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, RuntimeError) as err:
            raise _corrupt(path, err) from err
        return _decode(self._index["structure"], iter(arrays))

    def _chunk(self, chunk: int, path: str) -> Any:
        if chunk in self._open:
            self._open.move_to_end(chunk)
            return self._open[chunk]
        npz = np.load(path, allow_pickle=False)  # never unpickle: a cache file is data, not code
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        self._open[chunk] = npz
        if len(self._open) > _MAX_OPEN_CHUNKS:
            self._open.popitem(last=False)[1].close()
        return npz

    def writer(self) -> _FileWriter:
        return _FileWriter(self)


class _FileWriter:
    """Writes chunks under temporary names; ``commit`` renames them and writes the index last."""

    def __init__(self, store: _FileStore) -> None:
        self._store = store
        self._token = f"tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"  # see _remove_leftovers
        self._pending: dict[str, np.ndarray] = {}
        self._temps: list[str] = []
        self._count = 0
        self._structure: Any = None
        self._num_leaves = 0

    def append(self, element: Any) -> None:
        structure, arrays = _encode(element)
        if self._count == 0:
            self._structure, self._num_leaves = structure, len(arrays)
        elif _skeleton(structure) != _skeleton(self._structure):  # leaf kinds may vary (np.float64 vs 0-d array)
            raise TypeError(
                "cache needs every element to have the same structure. "
                f"Received: element {self._count} has structure {structure}, element 0 has {self._structure}"
            )
        offset = self._count % _CHUNK_SIZE
        self._pending.update({f"{offset}_{leaf}": array for leaf, array in enumerate(arrays)})
        self._count += 1
        if self._count % _CHUNK_SIZE == 0:
            self._flush()

    def _flush(self) -> None:
        directory = os.path.dirname(self._store.prefix)
        if directory:
            os.makedirs(directory, exist_ok=True)
        path = self._store.chunk_path(len(self._temps))

        def write(f: Any) -> None:  # a file object: np.savez would append ".npz" to a name
            np.savez(f, **self._pending)  # type: ignore[arg-type]  # numpy's stub types **kwds too narrowly

        try:
            self._temps.append(_write_temporary(path, self._token, write))
        except BaseException:
            self.abort()  # the chunks written before go too: this pass records nothing
            raise
        self._pending = {}

    def commit(self, seed: int) -> None:
        if self._store.is_complete():  # another pass completed first; keep its files, drop ours
            self.abort()
            return
        if self._pending or not self._temps:
            self._flush()
        for chunk, temp in enumerate(self._temps):
            os.replace(temp, self._store.chunk_path(chunk))
        self._temps = []
        index = {"version": _INDEX_VERSION, "num_elements": self._count, "chunk_size": _CHUNK_SIZE,
                 "num_leaves": self._num_leaves, "structure": self._structure, "seed": int(seed)}
        temp = _write_temporary(self._store.index_path, self._token, lambda f: f.write(json.dumps(index).encode()))
        os.replace(temp, self._store.index_path)  # the index appears last: it marks the cache complete
        self._store._index = index
        _remove_leftovers(self._store.prefix)

    def abort(self) -> None:
        for temp in self._temps:
            if os.path.exists(temp):
                os.remove(temp)
        self._temps, self._pending = [], {}


def _write_temporary(path: str, token: str, write: Callable[[Any], object]) -> str:
    """Writes ``<path>.<token>`` with ``write(file)`` and fsyncs it; on failure removes it and names ``path``.

    Raises:
        CheckpointError: If the disk (or quota) is full.
    """
    temp = f"{path}.{token}"
    try:
        with open(temp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the index can name it
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise_if_disk_full(err, Path(path), what="cache file",
                           unchanged="The cache is not written; its temporary files are removed. ")
        raise
    return temp


def _remove_leftovers(prefix: str) -> None:
    """Deletes the temporary files of writers of ``prefix`` on this host whose process is gone (killed)."""
    folder, name = os.path.split(prefix)
    pattern = re.compile(re.escape(name) + r"\.(\d+\.npz|index\.json)\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{32}$")
    host = socket.gethostname()
    for entry in os.listdir(folder or "."):
        match = pattern.match(entry)
        # NOTE: a process id names a process on its own host only; another host's writer may still be at work.
        if match and match["host"] == host and not _is_running(int(match["pid"])):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, entry))


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _corrupt(path: str, err: BaseException) -> CheckpointError:
    return CheckpointError(
        f"The cache file {path} is corrupt or partially written ({type(err).__name__}: {err}). "
        f"Delete it and the other files starting with the same prefix to rebuild the cache. Received: file={path}"
    )


def _read_index(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            index = json.load(f)
        if index.get("version") != _INDEX_VERSION:
            raise ValueError(f"unsupported version {index.get('version')!r}, expected {_INDEX_VERSION}")
        for key in ("num_elements", "chunk_size", "num_leaves", "seed"):
            if not isinstance(index.get(key), int):
                raise ValueError(f"missing or non-integer {key!r}")
        if "structure" not in index:
            raise ValueError("missing 'structure'")
    except (OSError, ValueError, AttributeError) as err:
        raise _corrupt(path, err) from err
    return index


def _encode(element: Any) -> tuple[Any, list[np.ndarray]]:
    """A JSON description of ``element``'s structure and leaf kinds, and its leaves as numpy arrays."""
    if isinstance(element, dict):
        if not all(isinstance(key, str) for key in element):
            raise TypeError(f"cache(filename) needs string dict keys. Received: keys {list(element)}")
        parts = [(key, _encode(value)) for key, value in element.items()]
        return {"dict": [[key, part[0]] for key, part in parts]}, [a for _, part in parts for a in part[1]]
    if isinstance(element, (tuple, list)):
        parts2 = [_encode(value) for value in element]
        kind = "tuple" if isinstance(element, tuple) else "list"
        return {kind: [part[0] for part in parts2]}, [a for part in parts2 for a in part[1]]
    return {"leaf": _leaf_kind(element)}, [_leaf_array(element)]


def _skeleton(structure: dict[str, Any]) -> Any:
    """``structure`` without leaf kinds: what must agree between elements."""
    if "dict" in structure:
        return [[key, _skeleton(sub)] for key, sub in structure["dict"]]
    if "leaf" in structure:
        return None
    kind = "tuple" if "tuple" in structure else "list"
    return (kind, [_skeleton(sub) for sub in structure[kind]])


def _leaf_kind(leaf: Any) -> str:
    if isinstance(leaf, torch.Tensor):
        return "torch"
    if isinstance(leaf, np.ndarray):
        return "array"
    return "scalar" if isinstance(leaf, np.generic) else "python"


def _leaf_array(leaf: Any) -> np.ndarray:
    try:
        array = leaf.detach().cpu().numpy() if isinstance(leaf, torch.Tensor) else np.asarray(leaf)
    except TypeError as err:  # e.g. bfloat16, which numpy cannot hold
        raise TypeError(f"cache(filename) cannot store this tensor as numpy. Received: {err}") from err
    if array.dtype.hasobject:
        raise TypeError(
            "cache(filename) stores plain numpy arrays and never pickles, so object arrays cannot be cached. "
            f"Convert the component to a numeric or string dtype. Received: dtype={array.dtype}"
        )
    return array


def _decode(structure: dict[str, Any], arrays: Any) -> Any:
    if "dict" in structure:
        return {key: _decode(sub, arrays) for key, sub in structure["dict"]}
    if "tuple" in structure or "list" in structure:
        kind = "tuple" if "tuple" in structure else "list"
        values = [_decode(sub, arrays) for sub in structure[kind]]
        return tuple(values) if kind == "tuple" else values
    kind, array = structure["leaf"], next(arrays)
    if kind == "torch":
        return torch.from_numpy(np.array(array))  # a copy: writable, owned by the tensor
    if kind == "scalar":
        return array[()]
    return array.item() if kind == "python" else array
