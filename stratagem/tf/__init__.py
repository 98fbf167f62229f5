"""TensorFlow's names on stratagem: ``import stratagem.tf as tf`` and the rest of a script as written.

This package holds names, argument translation and clear refusals only (STYLE section 1): every behaviour is
imported from the stratagem module that owns it (``stratagem.data``, ``stratagem.distribute``, ``stratagem.Model``'s
fit loop, ``stratagem.estimator``), from Keras 3 on the torch backend (layers, ops) or from torch. Tensors are torch
tensors.

Submodules and the heavier top-level names are imported on first use (as TensorFlow loads its own lazily), so that
``import stratagem.tf`` stays cheap and a name we do not provide raises an ``AttributeError`` that names it and the
stratagem way.
"""

from __future__ import annotations

import importlib
from typing import Any

from stratagem.tf._refusal import missing_name

# Submodules: `tf.<name>` -> the module that holds TF's names for that namespace.
_SUBMODULES: dict[str, str] = {
    # --- tf.keras (Keras 3 trained by stratagem) ---
    "keras": "stratagem.tf.keras",
    # --- custom training loops and state ---
    "distribute": "stratagem.tf.distribute",
    "train": "stratagem.tf.train",
    "saved_model": "stratagem.tf.saved_model",
    # --- ops, dtypes, data, config, files ---
}

# Top-level names that live in a submodule of this package: `tf.<name>` -> (module, attribute).
_LAZY_NAMES: dict[str, tuple[str, str]] = {
    # --- custom training loops ---
    "GradientTape": ("stratagem.tf._autodiff", "GradientTape"),
    # --- ops, dtypes, data, config, files ---
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        module = importlib.import_module(_SUBMODULES[name])
        globals()[name] = module
        return module
    if name in _LAZY_NAMES:
        module_name, attribute = _LAZY_NAMES[name]
        value = getattr(importlib.import_module(module_name), attribute)
        globals()[name] = value
        return value
    raise missing_name("tf", name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY_NAMES))
