"""PEP 562 lazy public names for stratagem's packages: a name is imported on its first use.

``stratagem`` and ``stratagem.distribute`` re-export names whose modules import torch, Keras and every strategy;
importing them eagerly would make every ``stratagem.*`` import pay for that, the launcher's included. Each package's
``__getattr__`` calls ``resolve`` instead (``hooks``).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any


def resolve(package: str, namespace: dict[str, Any], name: str, attributes: Mapping[str, str]) -> object:
    """The value of ``package.name``: ``attributes[name]``'s attribute of that name, or the submodule ``name``.

    A resolved attribute is stored in ``namespace`` (the package's ``globals()``), so later lookups skip this.

    Raises:
        AttributeError: If ``name`` is neither (as for any missing module attribute).
    """
    if name in attributes:
        value = getattr(importlib.import_module(attributes[name]), name)
        namespace[name] = value
        return value
    # A submodule, as after an eager import of the package: `stratagem.distribute.collectives`.
    if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
        return importlib.import_module(f"{package}.{name}")  # the import binds it in the package too
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def hooks(package: str, namespace: dict[str, Any],
          attributes: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The package's ``__getattr__`` (``resolve``) and ``__dir__`` (its globals and ``__all__``)."""
    return (lambda name: resolve(package, namespace, name, attributes),
            lambda: sorted(set(namespace) | set(namespace.get("__all__", ()))))
