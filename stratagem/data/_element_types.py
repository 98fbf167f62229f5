"""Element types (structure and dtypes) and tf.data's check that two mixed inputs agree; shapes may differ."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from stratagem._nest import map_structure


def _dtype_name(leaf: Any) -> str:
    if isinstance(leaf, torch.Tensor):
        return str(leaf.dtype).removeprefix("torch.")
    dtype = np.asarray(leaf).dtype
    return "string" if dtype.kind in "SUO" else dtype.name


def element_types(element: Any) -> Any:
    """The element's structure with each leaf replaced by its dtype's name (``"string"`` for text)."""
    return map_structure(_dtype_name, element)


def check_compatible(op: str, first: Any, other: Any, *, names: tuple[str, str]) -> None:
    """Raises ``TypeError`` naming ``op`` and ``names`` unless ``other``'s element types are ``first``'s."""
    if first != other:
        raise TypeError(
            f"{op} needs inputs whose elements have the same structure and dtypes (shapes may differ), as "
            f"tf.data does. Cast or map() the inputs to one structure and dtype first. "
            f"Received: {names[0]} element types={first}, {names[1]} element types={other}"
        )


def check_state(op: str, initial: Any, new_state: Any) -> None:
    """Raises ``TypeError`` unless ``new_state`` has the element types ``initial`` (of the initial state) has."""
    new = element_types(new_state)
    if new != initial:
        raise TypeError(
            f"{op}'s function must return a new state with the structure and dtypes of initial_state, as tf.data "
            "requires. Give initial_state the dtype the function produces (a Python 0 is int32: use np.int64(0) to add "
            f"int64 elements) or cast the new state. Received: initial_state types={initial}, new state types={new}")
