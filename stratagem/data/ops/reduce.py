"""``reduce``: folds every element of a dataset into one state (``Dataset.reduce``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stratagem.data._element_types import check_state, element_types
from stratagem.data._python_values import from_python
from stratagem.data.dataset import Dataset


def reduce_dataset(dataset: Dataset, initial_state: Any, reduce_func: Callable[[Any, Any], Any]) -> Any:
    """``reduce_func(state, element)`` over all elements, from ``initial_state``; returns the last state.

    As in tf.data: Python numbers are int32/float32, a tuple element is one argument, the state keeps its dtypes.

    Raises:
        TypeError: If ``reduce_func`` is not callable or changes the state's dtypes.
    """
    if not callable(reduce_func):
        raise TypeError(f"reduce_func must be callable. Received: reduce_func of type {type(reduce_func).__name__}")
    if dataset.cardinality() == -1:
        raise ValueError(f"reduce needs a finite dataset: this one is endless. Received: dataset={dataset}")
    state = from_python(initial_state)
    types = element_types(state)
    for element in dataset:
        state = from_python(reduce_func(state, element))
        check_state("reduce", types, state)
    return state
