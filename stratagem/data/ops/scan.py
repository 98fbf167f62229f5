"""``ScanDataset``: a running state threaded through the elements (``Dataset.scan``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stratagem.data._element_types import check_state, element_types
from stratagem.data._python_values import from_python, map_output
from stratagem.data._replay import ReplayIterator
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext


class ScanDataset(Dataset):
    """Yields ``output`` of ``new_state, output = scan_func(state, element)`` for each element.

    As in tf.data: Python numbers are int32/float32, a tuple element is one argument, the state keeps its dtypes.
    Restoring replays the epoch (the state holds tensors).

    Raises:
        TypeError: If ``scan_func`` is not callable, or (while iterating) does not return a ``(new_state, output)`` pair
            of the state's dtypes.

    Example:
        >>> [int(x) for x in Dataset.range(5).scan(np.int64(0), lambda s, x: (s + x, s + x))]
        [0, 1, 3, 6, 10]
    """

    def __init__(self, parent: Dataset, initial_state: Any, scan_func: Callable[[Any, Any], Any]) -> None:
        super().__init__(parent)
        if not callable(scan_func):
            raise TypeError(f"scan_func must be callable. Received: scan_func of type {type(scan_func).__name__}")
        self._initial_state = from_python(initial_state)
        self._types = element_types(self._initial_state)
        self._scan_func = scan_func

    def step(self, state: Any, element: Any) -> tuple[Any, Any]:
        """One call of ``scan_func``, checked."""
        result = self._scan_func(state, element)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError(f"scan_func must return a (new_state, output) pair. Received: {type(result).__name__} "
                            f"{result!r:.200}")
        new_state = from_python(result[0])
        check_state("scan", self._types, new_state)
        return new_state, map_output(result[1])

    def cardinality(self) -> int:
        """The input's: one output per element, as in tf.data."""
        return self._parents[0].cardinality()

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _ScanIterator(self, self._parents[0]._make_iterator(ctx))

    def __str__(self) -> str:
        return f"ScanDataset({getattr(self._scan_func, '__name__', 'fn')}) <- {self._parents[0]}"


class _ScanIterator(ReplayIterator):
    def __init__(self, dataset: ScanDataset, parent: DatasetIterator) -> None:
        self._dataset = dataset
        super().__init__(parent)

    def _reset(self) -> None:
        self._state = self._dataset._initial_state

    def _produce(self) -> Any:
        self._state, output = self._dataset.step(self._state, next(self._parent))
        return output
