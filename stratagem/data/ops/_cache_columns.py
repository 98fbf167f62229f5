"""The in-memory cache's columns: one array (or tensor) per leaf, and the first pass filled along a reader's order.

``OrderedFill`` is how a cache over a random-access parent serves its first pass without waiting for the whole
fill. The reader above announces the positions it will fetch, in order (``Dataset._expect_order``: a ``batch``
over a ``shuffle`` announces the epoch's permutation). Where the parent's rows are independent of how they are
fetched (``Dataset._rows_independent``: a source, a map whose batch calls run under vmap), the fill computes the
parent's elements in chunks taken along that order (``FILL_ROWS``, doubling up to ``MAX_FILL_ROWS``: the first
batch waits for a small chunk, a map's cost per call is paid 11 times per 60,000 elements, not 59; larger chunks
measured slower, their temporaries out of the CPU caches), copies each chunk into the columns (in that order;
``slots`` maps an element to its row) and serves the reader's fetches as slices of the chunk just computed: each
element is computed once, and the pass pays no separate read of the columns. The elements are the ones the fill
in index order gives (that is what independent rows means); a request off the order finishes the fill and is
served from the columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from stratagem._nest import map_structure
from stratagem.data._column_memory import empty_rows
from stratagem.data._structure import leaves, take_rows
from stratagem.data.iterator import IterContext

if TYPE_CHECKING:
    from stratagem.data.dataset import Dataset

FILL_ROWS = 1024  # elements per batched fetch while filling columns
MAX_FILL_ROWS = 8192  # the largest chunk of an ordered fill


def empty_columns(chunk: Any, length: int) -> Any | None:
    """Per leaf of ``chunk``, an empty array of ``length`` rows of its row shape and dtype (None: a leaf is no batch)."""
    kinds = leaves(chunk)
    if not kinds or not all(isinstance(leaf, (np.ndarray, torch.Tensor)) and leaf.ndim >= 1 for leaf in kinds):
        return None
    if any(isinstance(leaf, np.ndarray) and leaf.dtype.hasobject for leaf in kinds):
        return None  # object rows (bytes) stay element objects in the list
    return map_structure(lambda leaf: empty_rows(leaf, length), chunk)  # fresh pages populated ahead (_column_memory)


def copy_rows(columns: Any, chunk: Any, start: int, stop: int) -> bool:
    """Writes ``chunk`` into rows ``start:stop``; False if its structure, dtypes or row shapes differ."""
    targets, sources = leaves(columns), leaves(chunk)
    if len(targets) != len(sources) or _structure_of(columns) != _structure_of(chunk):
        return False
    for target, source in zip(targets, sources):
        if (type(target) is not type(source) or target.dtype != source.dtype
                or tuple(target.shape[1:]) != tuple(source.shape[1:]) or source.shape[0] != stop - start):
            return False
    for target, source in zip(targets, sources):
        target[start:stop] = source
    return True


def _structure_of(structure: Any) -> Any:
    return map_structure(lambda leaf: None, structure)


def is_permutation(order: np.ndarray, length: int) -> bool:
    """Whether ``order`` holds every position of ``range(length)`` exactly once."""
    if order.ndim != 1 or len(order) != length or length == 0 or order.min() < 0 or order.max() >= length:
        return False
    return bool(np.all(np.bincount(order, minlength=length) == 1))


class OrderedFill:
    """The first pass of a cache computed along an announced order (module docstring).

    Args:
        parent: The cache's parent, random-access with ``length`` elements and rows independent of fetching.
        ctx: The fill's context (the parent's epoch 0 under the reader's seed).
        order: A permutation of ``range(length)``: the positions the reader will fetch, in order.
    """

    def __init__(self, parent: Dataset, ctx: IterContext, order: np.ndarray, length: int) -> None:
        self._parent, self.ctx, self._order, self._length = parent, ctx, order, length
        self._served = 0  # positions of the order handed out
        self._computed = 0  # positions of the order computed and copied into the columns
        self._chunk: Any = None  # the last chunk's elements: positions _chunk_start:_computed of the order
        self._chunk_start = 0
        self.columns: Any = None  # row p holds element order[p]

    @property
    def complete(self) -> bool:
        """Every position of the order computed into the columns."""
        return self._computed == self._length

    @property
    def all_served(self) -> bool:
        """Every position of the order handed out to the reader."""
        return self._served == self._length

    def slots(self) -> np.ndarray:
        """Row of the columns holding each element."""
        slots = np.empty(self._length, dtype=np.int64)
        slots[self._order] = np.arange(self._length, dtype=np.int64)
        return slots

    def take(self, indices: Sequence[int], ctx: IterContext) -> Any | None:
        """The elements at ``indices`` if they are the next ones of the order, else None (nothing is served).

        Raises:
            ValueError: If the parent's chunks do not fit columns (ragged or changing elements): the caller
                fills the cache the other way.
        """
        start, stop = self._served, self._served + len(indices)
        if (ctx.seed != self.ctx.seed or not len(indices) or stop > self._length
                or list(indices) != self._order[start:stop].tolist()):
            return None
        while self._computed < stop:
            self._compute_next()
        self._served = stop
        if start >= self._chunk_start:  # a slice of the chunk just computed: no copy (its rows are in the columns)
            return take_rows(self._chunk, slice(start - self._chunk_start, stop - self._chunk_start))
        # Across two chunks: a copy of the columns' rows, which the reader may then change freely.
        return map_structure(lambda leaf: leaf[start:stop].copy() if isinstance(leaf, np.ndarray)
                             else leaf[start:stop].clone(), self.columns)

    def finish(self) -> None:
        """Computes the rest of the order into the columns."""
        while not self.complete:
            self._compute_next()

    def _compute_next(self) -> None:
        start = self._computed
        stop = min(self._length, start + min(MAX_FILL_ROWS, max(FILL_ROWS, start)))
        chunk = self._parent._get_many(self._order[start:stop].tolist(), self.ctx)
        if self.columns is None:
            self.columns = empty_columns(chunk, self._length)
        # Copied before any of its rows is served: what the reader does to a served batch never reaches the cache.
        if self.columns is None or not copy_rows(self.columns, chunk, start, stop):
            raise ValueError("the parent's elements do not fit columns")
        self._chunk, self._chunk_start, self._computed = chunk, start, stop
