"""``ZipDataset``: tuples of the i-th elements of several datasets (also ``enumerate``)."""

from __future__ import annotations

from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.options import INFINITE_CARDINALITY


class ZipDataset(Dataset):
    """See ``Dataset.zip``; ends with the shortest input."""

    def __init__(self, datasets: tuple[Dataset, ...]) -> None:
        if not datasets or not all(isinstance(d, Dataset) for d in datasets):
            raise TypeError("zip takes one or more Datasets. Received: " + ", ".join(type(d).__name__ for d in datasets))
        super().__init__(*datasets)

    def _length(self) -> int | None:
        lengths = [d._length() for d in self._parents]
        if any(n is None for n in lengths):
            return None
        finite = [n for n in lengths if n != INFINITE_CARDINALITY]
        return min(finite) if finite else INFINITE_CARDINALITY  # type: ignore[type-var]

    def _get(self, index: int, ctx: IterContext) -> Any:
        return tuple(d._get(index, ctx) for d in self._parents)

    def _get_many(self, indices: Any, ctx: IterContext) -> Any:
        return tuple(d._get_many(indices, ctx) for d in self._parents)

    def _make_iterator(self, ctx: IterContext) -> DatasetIterator:
        if self._length() is not None:
            return super()._make_iterator(ctx)
        return _StreamingZipIterator([d._make_iterator(ctx) for d in self._parents])

    def __str__(self) -> str:
        return "ZipDataset(" + ", ".join(str(d) for d in self._parents) + ")"


class _StreamingZipIterator(DatasetIterator):
    _PARENTS = "parents"

    def __init__(self, parents: list[DatasetIterator]) -> None:
        self._parents = parents

    def __next__(self) -> Any:
        # A list comprehension, not a generator expression: inside a generator, the StopIteration
        # of an exhausted input would turn into RuntimeError (PEP 479) instead of ending the zip.
        return tuple([next(p) for p in self._parents])

    def get_state(self) -> dict[str, Any]:
        return {self._PARENTS: [p.get_state() for p in self._parents]}

    def set_state(self, state: dict[str, Any]) -> None:
        for parent, sub in zip(self._parents, state[self._PARENTS]):
            parent.set_state(sub)

    def close(self) -> None:
        for parent in self._parents:
            parent.close()
