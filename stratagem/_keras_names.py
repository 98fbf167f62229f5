"""``get`` by Keras name for losses and metrics: a name in a literal table, or its class name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def factory_for(identifier: str, by_name: Mapping[str, Callable[..., T]], *, kind: str, example: str,
                alternatives: str) -> Callable[..., T]:
    """``by_name``'s entry for ``identifier``, a lowercase Keras name or a class name (Keras takes both).

    Raises:
        ValueError: If it is neither, listing the names (``kind`` names the argument).
    """
    by_class_name = {getattr(factory, "__name__", ""): factory for factory in by_name.values()}
    factory = by_name.get(identifier.lower()) or by_class_name.get(identifier)
    if factory is None:
        raise ValueError(f"Unknown {kind}. Expected one of {sorted(by_name)} (or a class name such as {example!r}), "
                         f"{alternatives}. Received: {kind}={identifier!r}")
    return factory
