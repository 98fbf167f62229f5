"""``GroupByWindowDataset``: elements grouped by a key into windows, each reduced to a dataset.

A full window goes with its key to ``reduce_func`` as one dataset of whole elements (unlike ``window``'s dataset per
component); when the input ends, the open windows are reduced in increasing key order, as in tf.data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from stratagem.data._replay import ReplayIterator
from stratagem.data._structure import call_with_element
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext
from stratagem.data.ops.window import ElementListDataset


def _as_key(value: Any, what: str) -> int:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, bool) or np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iu":
        raise TypeError(f"group_by_window's {what} must return an integer scalar (tf.int64). "
                        f"Received: {value!r} of type {type(value).__name__}")
    return int(value)


class GroupByWindowDataset(Dataset):
    """See ``Dataset.group_by_window``.

    Args:
        parent: The input dataset.
        key_func: Element (tuples unpacked) -> integer key.
        reduce_func: ``(key, window_dataset)`` -> ``Dataset``.
        window_size: Elements per window, or None with ``window_size_func``.
        window_size_func: Key -> window size.

    Raises:
        ValueError: Unless exactly one of ``window_size`` and ``window_size_func`` is given.

    Example:
        >>> ds = Dataset.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(5), window_size=5)
        >>> [x.tolist() for x in ds]
        [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    """

    def __init__(self, parent: Dataset, key_func: Callable[..., Any], reduce_func: Callable[[Any, Dataset], Dataset],
                 window_size: int | None = None, window_size_func: Callable[[Any], Any] | None = None) -> None:
        super().__init__(parent)
        if (window_size is None) == (window_size_func is None):
            raise ValueError("group_by_window needs exactly one of window_size and window_size_func. "
                             f"Received: window_size={window_size!r}, window_size_func={window_size_func!r}")
        for name, fn in (("key_func", key_func), ("reduce_func", reduce_func)):
            if not callable(fn):
                raise TypeError(f"{name} must be callable. Received: {name} of type {type(fn).__name__}")
        self._key_func, self._reduce_func = key_func, reduce_func
        self._window_size, self._window_size_func = window_size, window_size_func

    def key_of(self, element: Any) -> int:
        return _as_key(call_with_element(self._key_func, element), "key_func")

    def size_of(self, key: int) -> int:
        size = self._window_size if self._window_size_func is None else self._window_size_func(np.int64(key))
        size = _as_key(size, "window_size_func")
        if size <= 0:
            raise ValueError(f"group_by_window's window size must be positive. Received: window_size={size}, key={key}")
        return size

    def reduce_window(self, key: int, rows: list[Any]) -> Dataset:
        out = self._reduce_func(np.int64(key), ElementListDataset(rows))
        if not isinstance(out, Dataset):
            raise TypeError(f"group_by_window's reduce_func must return a Dataset. Received: {type(out).__name__}")
        return out

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _GroupByWindowIterator(self, self._parents[0]._make_iterator(ctx), ctx)

    def __str__(self) -> str:
        return f"GroupByWindowDataset({getattr(self._key_func, '__name__', 'key_func')}) <- {self._parents[0]}"


class _GroupByWindowIterator(ReplayIterator):
    def __init__(self, dataset: GroupByWindowDataset, parent: DatasetIterator, ctx: IterContext) -> None:
        self._dataset, self._ctx = dataset, ctx
        super().__init__(parent)

    def _reset(self) -> None:
        self._windows: dict[int, list[Any]] = {}
        self._output: DatasetIterator | None = None
        self._exhausted = False

    def _produce(self) -> Any:
        while True:
            if self._output is not None:
                try:
                    return next(self._output)
                except StopIteration:
                    self._output.close()
                    self._output = None
            key, rows = self._next_window()
            self._output = self._dataset.reduce_window(key, rows)._make_iterator(self._ctx)

    def _next_window(self) -> tuple[int, list[Any]]:
        while not self._exhausted:
            try:
                element = next(self._parent)
            except StopIteration:
                self._exhausted = True
                break
            key = self._dataset.key_of(element)
            window = self._windows.setdefault(key, [])
            window.append(element)
            if len(window) >= self._dataset.size_of(key):
                return key, self._windows.pop(key)
        if not self._windows:
            raise StopIteration
        key = min(self._windows)  # the input ended: what is left, by increasing key
        return key, self._windows.pop(key)

    def close(self) -> None:
        if self._output is not None:
            self._output.close()
        super().close()
