"""``RepeatDataset``: the parent ``count`` times (forever if None/-1), each pass a new epoch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.options import INFINITE_CARDINALITY


class RepeatDataset(Dataset):
    """See ``Dataset.repeat``."""

    def __init__(self, parent: Dataset, count: int | None) -> None:
        super().__init__(parent)
        count = -1 if count is None else int(count)
        if count < -1:
            raise ValueError(f"repeat count must be -1 (forever), 0 or positive. Received: count={count}")
        self.count = count

    def _pass_context(self, ctx: IterContext, repetition: int) -> IterContext:
        # Each repetition is its own epoch, so shuffles below reshuffle per pass.
        return IterContext(seed=ctx.seed, epoch=ctx.epoch * 1_000_003 + repetition)

    def _length(self) -> int | None:
        n = self._parents[0]._length()
        if n is None:
            return None
        if self.count == -1:
            return INFINITE_CARDINALITY if n != 0 else 0
        return INFINITE_CARDINALITY if n == INFINITE_CARDINALITY else n * self.count

    def _get(self, index: int, ctx: IterContext) -> Any:
        n = self._parents[0]._length()
        assert n is not None and n > 0
        return self._parents[0]._get(index % n, self._pass_context(ctx, index // n))

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        n = self._parents[0]._length()
        assert n is not None and n > 0
        passes = {i // n for i in indices}
        if len(passes) == 1:  # the common case: one batch within one pass
            return self._parents[0]._get_many([i % n for i in indices], self._pass_context(ctx, passes.pop()))
        return super()._get_many(indices, ctx)

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is not None:
            return super()._make_iterator(ctx)
        return _StreamingRepeatIterator(self, ctx)

    def __str__(self) -> str:
        return f"RepeatDataset({self.count}) <- {self._parents[0]}"


class _StreamingRepeatIterator(DatasetIterator):
    _PASS = "repetition"
    _PARENT = "parent"

    def __init__(self, dataset: RepeatDataset, ctx: IterContext) -> None:
        self._dataset, self._ctx = dataset, ctx
        self._repetition = 0
        self._parent = dataset._parents[0]._make_iterator(dataset._pass_context(ctx, 0))

    def __next__(self) -> Any:
        while self._dataset.count == -1 or self._repetition < self._dataset.count:
            try:
                return next(self._parent)
            except StopIteration:
                self._repetition += 1
                self._parent.close()
                self._parent = self._dataset._parents[0]._make_iterator(self._dataset._pass_context(self._ctx, self._repetition))
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return {self._PASS: self._repetition, self._PARENT: self._parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._repetition = int(state[self._PASS])
        self._parent.close()
        self._parent = self._dataset._parents[0]._make_iterator(self._dataset._pass_context(self._ctx, self._repetition))
        self._parent.set_state(state[self._PARENT])

    def close(self) -> None:
        self._parent.close()
