"""``ZipDataset``: the i-th elements of a (nested) structure of datasets, in that structure (also ``enumerate``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.options import INFINITE_CARDINALITY


class ZipDataset(Dataset):
    """See ``Dataset.zip``: ``datasets`` nested in tuples and dicts give elements so nested; ends with the shortest."""

    def __init__(self, datasets: Any) -> None:
        flat: list[Dataset] = []
        self._structure = _flatten(datasets, flat)
        if not flat:
            raise TypeError(f"zip takes one or more Datasets. Received: datasets={datasets!r}")
        super().__init__(*flat)

    def _pack(self, flat: list[Any]) -> Any:
        if self._structure is None:  # a flat tuple of datasets: the common case, no walk
            return tuple(flat)
        return _pack(self._structure, iter(flat))

    def _length(self) -> int | None:
        lengths = [d._length() for d in self._parents]
        if any(n is None for n in lengths):
            return None
        finite = [n for n in lengths if n != INFINITE_CARDINALITY]
        return min(finite) if finite else INFINITE_CARDINALITY  # type: ignore[type-var]

    def _get(self, index: int, ctx: IterContext) -> Any:
        return self._pack([d._get(index, ctx) for d in self._parents])

    def _get_many(self, indices: Any, ctx: IterContext) -> Any:
        return self._pack([d._get_many(indices, ctx) for d in self._parents])

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _StreamingZipIterator([d._make_iterator(ctx) for d in self._parents], self._pack)

    def __str__(self) -> str:
        return "ZipDataset(" + ", ".join(str(d) for d in self._parents) + ")"


class _StreamingZipIterator(DatasetIterator):
    _PARENTS = "parents"

    def __init__(self, parents: list[DatasetIterator], pack: Callable[[list[Any]], Any]) -> None:
        self._parents, self._pack = parents, pack

    def __next__(self) -> Any:
        # A list comprehension, not a generator expression: inside a generator, the StopIteration
        # of an exhausted input would turn into RuntimeError (PEP 479) instead of ending the zip.
        return self._pack([next(p) for p in self._parents])

    def get_state(self) -> dict[str, Any]:
        return {self._PARENTS: [p.get_state() for p in self._parents]}

    def set_state(self, state: dict[str, Any]) -> None:
        for parent, sub in zip(self._parents, state[self._PARENTS]):
            parent.set_state(sub)

    def close(self) -> None:
        for parent in self._parents:
            parent.close()


_LEAF = object()  # a dataset's place in the structure


def _flatten(datasets: Any, flat: list[Dataset]) -> Any:
    """Appends the datasets to ``flat``; returns the structure with ``_LEAF`` in their places (None if a flat tuple)."""
    if isinstance(datasets, tuple) and all(isinstance(d, Dataset) for d in datasets):
        flat.extend(datasets)
        return None
    return _structure_of(datasets, flat)


def _structure_of(datasets: Any, flat: list[Dataset]) -> Any:
    if isinstance(datasets, Dataset):
        flat.append(datasets)
        return _LEAF
    if isinstance(datasets, dict):
        return {key: _structure_of(value, flat) for key, value in datasets.items()}
    if isinstance(datasets, tuple):
        return tuple(_structure_of(value, flat) for value in datasets)
    hint = " (a list is one value in tf.data, not a structure: use a tuple)" if isinstance(datasets, list) else ""
    raise TypeError(f"zip takes Datasets nested in tuples and dicts{hint}. Received: {type(datasets).__name__} {datasets!r}")


def _pack(structure: Any, flat: Iterator[Any]) -> Any:
    if structure is _LEAF:
        return next(flat)
    if isinstance(structure, dict):
        return {key: _pack(value, flat) for key, value in structure.items()}
    return tuple(_pack(value, flat) for value in structure)
