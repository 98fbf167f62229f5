"""``RepeatDataset``: the parent ``count`` times (forever if None/-1), each pass a new epoch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import ChainIterator, DatasetIterator, IterContext
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
        return ctx.at(seed=ctx.seed, epoch=ctx.epoch * 1_000_003 + repetition)

    def _length(self) -> int | None:
        n = self._parents[0]._length()
        if n is None:
            return None
        if self.count == 0:  # tf.data: repeat(0) is empty even over an endless input
            return 0
        if self.count == -1:
            return INFINITE_CARDINALITY if n != 0 else 0
        return INFINITE_CARDINALITY if n == INFINITE_CARDINALITY else n * self.count

    def _get(self, index: int, ctx: IterContext) -> Any:
        n = self._parents[0]._length()
        assert n is not None and n != 0
        if n == INFINITE_CARDINALITY:  # the first pass never ends
            return self._parents[0]._get(index, self._pass_context(ctx, 0))
        return self._parents[0]._get(index % n, self._pass_context(ctx, index // n))

    def _get_many(self, indices: Sequence[int], ctx: IterContext) -> Any:
        n = self._parents[0]._length()
        assert n is not None and n != 0
        if n == INFINITE_CARDINALITY:
            return self._parents[0]._get_many(indices, self._pass_context(ctx, 0))
        passes = {i // n for i in indices}
        if len(passes) == 1:  # the common case: one batch within one pass
            return self._parents[0]._get_many([i % n for i in indices], self._pass_context(ctx, passes.pop()))
        return super()._get_many(indices, ctx)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _StreamingRepeatIterator(self, ctx)

    def __str__(self) -> str:
        return f"RepeatDataset({self.count}) <- {self._parents[0]}"


class _StreamingRepeatIterator(ChainIterator):
    _NUMBER = "repetition"

    def __init__(self, dataset: RepeatDataset, ctx: IterContext) -> None:
        self._dataset = dataset
        super().__init__(ctx)

    def _start(self, number: int) -> DatasetIterator:
        self._pass_is_empty = True  # a fresh pass that ends at once means the input is empty
        return self._dataset._parents[0]._make_iterator(self._dataset._pass_context(self._ctx, number))

    def __next__(self) -> Any:
        while self._dataset.count == -1 or self._number < self._dataset.count:
            try:
                element = next(self._current)
            except StopIteration:
                if self._pass_is_empty:  # tf.data: repeating an empty input ends instead of spinning forever
                    raise
                self._switch(self._number + 1)
                continue
            self._pass_is_empty = False
            return element
        raise StopIteration

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)  # the seed and epoch travel in the state: later passes are built from them
        self._pass_is_empty = False  # the restored pass may have produced elements before the save
