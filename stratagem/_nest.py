"""Apply a function to every tensor of a nested tuple/list/dict batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def map_structure(fn: Callable[[Any], Any], structure: Any) -> Any:
    """Returns ``structure`` with ``fn`` applied to each leaf (tuples, lists and dicts recurse)."""
    if isinstance(structure, dict):
        return {key: map_structure(fn, value) for key, value in structure.items()}
    if isinstance(structure, (tuple, list)):
        return type(structure)(map_structure(fn, value) for value in structure)
    return fn(structure)


def first_leaf(structure: Any) -> Any:
    """The first leaf in depth-first order (tuples, lists and dicts descend into their first item)."""
    while isinstance(structure, (dict, tuple, list)):
        structure = next(iter(structure.values())) if isinstance(structure, dict) else structure[0]
    return structure


def batch_size_of(structure: Any) -> int:
    """Length of the leading axis of the first leaf."""
    return int(first_leaf(structure).shape[0])
