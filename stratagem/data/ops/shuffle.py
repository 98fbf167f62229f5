"""Shuffling: a uniform permutation over a random-access parent, a buffer otherwise.

Over a random-access parent, ``shuffle`` permutes indices: each epoch is a
uniform random order whatever ``buffer_size`` is (a buffer as large as the
data, at no memory cost, since only indices are held), and restoring a
position is O(1). Over a streaming parent it keeps tf.data's buffer: fill
``buffer_size`` elements, emit a random one, refill. Its state is the
parent's state at the start of the epoch plus a count, and restoring replays
the buffer from there (documented cost: the parent re-produces those elements).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from stratagem.data.dataset import Dataset, _check_positive
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops.identity import IndexMapDataset


def mix_seed(*parts: int) -> int:
    """Combines integers into one well-spread 32-bit seed."""
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(1)[0])


def shuffle_dataset(parent: Dataset, buffer_size: int, *, seed: int | None, reshuffle_each_iteration: bool) -> Dataset:
    _check_positive("buffer_size", buffer_size)
    if parent._length() is not None and parent._length() != -1:
        return PermutationShuffleDataset(parent, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration)
    return BufferShuffleDataset(parent, buffer_size, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration)


class _ShuffleBase(Dataset):
    def __init__(self, parent: Dataset, *, seed: int | None, reshuffle_each_iteration: bool) -> None:
        super().__init__(parent)
        self._seed, self._reshuffle = seed, reshuffle_each_iteration
        # Distinguishes two unseeded shuffles of one pipeline, identically in every process.
        self._salt = zlib.crc32(str(parent).encode())

    def epoch_seed(self, ctx: IterContext) -> int:
        key = (ctx.seed, ctx.epoch)
        cached = self.__dict__.get("_seed_cache")
        if cached is None or cached[0] != key:  # once per epoch, not once per element
            base = self._seed if self._seed is not None else ctx.seed
            self._seed_cache = (key, mix_seed(base, self._salt, ctx.epoch if self._reshuffle else 0))
        return self._seed_cache[1]


class PermutationShuffleDataset(_ShuffleBase, IndexMapDataset):
    """A fresh uniform permutation of the parent's indices each epoch."""

    def __init__(self, parent: Dataset, *, seed: int | None, reshuffle_each_iteration: bool) -> None:
        super().__init__(parent, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration)
        self._cache: tuple[int, np.ndarray] | None = None

    def _permutation(self, ctx: IterContext) -> np.ndarray:
        seed = self.epoch_seed(ctx)
        if self._cache is None or self._cache[0] != seed:
            n = self._parents[0]._length()
            assert n is not None
            self._cache = (seed, np.random.default_rng(seed).permutation(n))
        return self._cache[1]

    def _length(self) -> int | None:
        return self._parents[0]._length()

    def _parent_indices(self, indices: Sequence[int], ctx: IterContext) -> Sequence[int]:
        permutation = self._permutation(ctx)
        if isinstance(indices, range) and indices.step == 1 and 0 <= indices.start <= indices.stop <= len(permutation):
            return permutation[indices.start:indices.stop].tolist()  # type: ignore[no-any-return]  # a batch's rows
        return permutation[np.asarray(indices, dtype=np.int64)].tolist()  # type: ignore[no-any-return]

    def _expect_order(self, order: np.ndarray, ctx: IterContext) -> None:
        self._parents[0]._expect_order(self._permutation(ctx)[order], ctx)

    def __str__(self) -> str:
        return f"ShuffleDataset(permutation, seed={self._seed}) <- {self._parents[0]}"


class BufferShuffleDataset(_ShuffleBase):
    """tf.data's shuffle buffer over a streaming parent."""

    def __init__(self, parent: Dataset, buffer_size: int, *, seed: int | None, reshuffle_each_iteration: bool) -> None:
        super().__init__(parent, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration)
        self.buffer_size = int(buffer_size)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _BufferShuffleIterator(self, ctx)

    def __str__(self) -> str:
        return f"ShuffleDataset(buffer_size={self.buffer_size}, seed={self._seed}) <- {self._parents[0]}"


class _BufferShuffleIterator(DatasetIterator):
    _START = "parent_at_start"
    _COUNT = "num_produced"

    def __init__(self, dataset: BufferShuffleDataset, ctx: IterContext) -> None:
        self._dataset = dataset
        self._parent = dataset._parents[0]._make_iterator(ctx)
        self._seed = dataset.epoch_seed(ctx)
        self._start_state = self._parent.get_state()
        self._reset()

    def _reset(self) -> None:
        self._rng = np.random.default_rng(self._seed)
        self._buffer: list[Any] = []
        self._exhausted = False
        self._count = 0

    def __next__(self) -> Any:
        while not self._exhausted and len(self._buffer) < self._dataset.buffer_size:
            try:
                self._buffer.append(next(self._parent))
            except StopIteration:
                self._exhausted = True
        if not self._buffer:
            raise StopIteration
        pick = int(self._rng.integers(len(self._buffer)))
        # Swap-remove keeps the draw O(1); the order it leaves is part of the replayed algorithm.
        self._buffer[pick], self._buffer[-1] = self._buffer[-1], self._buffer[pick]
        self._count += 1
        return self._buffer.pop()

    def get_state(self) -> dict[str, Any]:
        return {self._START: self._start_state, self._COUNT: self._count, self._SEED: self._seed}

    def set_state(self, state: dict[str, Any]) -> None:
        self._seed = int(state[self._SEED])
        self._start_state = state[self._START]
        self._parent.set_state(self._start_state)
        self._reset()
        for _ in range(int(state[self._COUNT])):  # replay: the parent re-produces what the buffer held
            next(self)

    def close(self) -> None:
        self._parent.close()
