"""Stateful iterators: ``__next__``, ``get_state()`` and ``set_state(state)``.

A state is a dict of ints, strings, lists and nested dicts that round-trips
through JSON: never tensors or pickles. Keys are class constants. Restoring a
state makes the iterator continue with exactly the elements that had not been
consumed when the state was taken.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratagem.data.dataset import Dataset


@dataclass(frozen=True)
class IterContext:
    """What every iterator of one pipeline shares.

    Args:
        seed: Seed of random ops that were given none; every worker of a job
            uses the same one, so they agree on the global element order.
        epoch: Which pass over the data this iterator makes (reshuffles differ).
        map_vectorization: The pipeline's
            ``options.experimental_optimization.map_vectorization``: None (the
            default) runs per-element maps once per batch under vmap where that
            gives the same elements, True adds the sampled check, False never
            (``ops/map.py``).
    """

    seed: int = 0
    epoch: int = 0
    map_vectorization: bool | None = None

    def at(self, *, seed: int, epoch: int) -> IterContext:
        """This context at another seed and epoch (a restored position); the pipeline's switches stay."""
        return dataclasses.replace(self, seed=seed, epoch=epoch)


class Pending:
    """Elements being fetched: ``result()`` waits for them, ``cancel()`` drops them.

    Random-access nodes hand these out from ``_submit_many``, so an iterator
    can start the next batches (on a parallel map's workers) before it needs them.
    """

    def __init__(self, result: Any, cancel: Any = None) -> None:
        self._result, self._cancel = result, cancel

    def result(self) -> Any:
        return self._result()

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel()

    def then(self, fn: Any) -> Pending:
        """A handle whose result is ``fn(result)``."""
        return Pending(lambda: fn(self.result()), self._cancel)


class DatasetIterator(Iterator[Any], abc.ABC):
    """Base of every pipeline iterator; the state keys most of them use are its constants."""

    _PARENT = "parent"  # the state of the iterator this one reads from
    _SEED = "seed"
    _EPOCH = "epoch"
    _INDEX = "index"

    @abc.abstractmethod
    def __next__(self) -> Any: ...

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Position of this iterator, as JSON-serialisable plain values."""

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Moves this iterator to a position returned by ``get_state``."""

    def close(self) -> None:
        """Releases threads or processes the iterator owns; idempotent."""

    def __iter__(self) -> DatasetIterator:
        return self

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass


class ParentPositionIterator(DatasetIterator):
    """A streaming iterator over one parent whose position is the parent's (map, filter, batch, ...).

    Subclasses set ``self._parent`` and implement ``__next__``; some add keys of their own to the state.
    """

    _parent: DatasetIterator

    def get_state(self) -> dict[str, Any]:
        return {self._PARENT: self._parent.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state[self._PARENT])

    def close(self) -> None:
        parent = getattr(self, "_parent", None)
        if parent is not None:
            parent.close()


class CountingIterator(ParentPositionIterator):
    """A streaming iterator whose position is its parent's plus a count (take, shard), kept under ``_COUNT``."""

    _COUNT: str

    def __init__(self, parent: DatasetIterator) -> None:
        self._parent, self._counted = parent, 0

    def get_state(self) -> dict[str, Any]:
        return {self._COUNT: self._counted, **super().get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._counted = int(state[self._COUNT])
        super().set_state(state)


class ChainIterator(DatasetIterator):
    """Iterators made one after another (concatenate's inputs, repeat's passes), each by ``_start(number)``.

    The state holds the current one's number (under ``_NUMBER``) and state,
    and the seed and epoch, which the later ones are built from.
    """

    _NUMBER: str

    def __init__(self, ctx: IterContext) -> None:
        self._ctx, self._number = ctx, 0
        self._current = self._start(0)

    @abc.abstractmethod
    def _start(self, number: int) -> DatasetIterator:
        """The ``number``-th iterator, made from ``self._ctx``."""

    def _switch(self, number: int) -> None:
        self._current.close()
        self._number, self._current = number, self._start(number)

    def get_state(self) -> dict[str, Any]:
        return {self._NUMBER: self._number, self._SEED: self._ctx.seed, self._EPOCH: self._ctx.epoch,
                self._PARENT: self._current.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._ctx = self._ctx.at(seed=int(state[self._SEED]), epoch=int(state[self._EPOCH]))
        self._switch(int(state[self._NUMBER]))
        self._current.set_state(state[self._PARENT])

    def close(self) -> None:
        self._current.close()


class IndexIterator(DatasetIterator):
    """Iterates a random-access dataset by position: its state is one integer."""

    def __init__(self, dataset: Dataset, ctx: IterContext) -> None:
        self._dataset = dataset
        self._ctx = ctx
        self._index = 0
        self._length = dataset._length()

    def __next__(self) -> Any:
        if self._length is not None and self._length >= 0 and self._index >= self._length:
            raise StopIteration
        element = self._dataset._get(self._index, self._ctx)
        self._index += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return {self._INDEX: self._index, self._EPOCH: self._ctx.epoch, self._SEED: self._ctx.seed}

    def set_state(self, state: dict[str, Any]) -> None:
        self._index = int(state[self._INDEX])
        self._ctx = self._ctx.at(seed=int(state[self._SEED]), epoch=int(state[self._EPOCH]))


def check_json_state(state: dict[str, Any]) -> None:
    """Raises ``TypeError`` unless ``state`` survives a JSON round trip unchanged."""
    try:
        again = json.loads(json.dumps(state))
    except (TypeError, ValueError) as err:
        raise TypeError(f"iterator state must be JSON-serialisable plain values. Received: {state!r}") from err
    if again != state:
        raise TypeError(f"iterator state changed in a JSON round trip (tuples or non-str keys?). Received: {state!r}")
