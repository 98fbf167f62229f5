"""Keras's own files for a Keras model trained by stratagem: ``.keras``/``.h5`` models and ``.weights.h5`` weights.

``Model.save``/``save_weights``/``load_weights`` of a Keras model to a path with Keras's suffix write the file Keras
would (``keras.models.load_model`` reads it in safe mode), but only the chief writes, through a temporary file renamed
into place, so replicas never interleave and a crash never leaves half a file. This module never imports Keras.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from stratagem.checkpoint.io import atomic_write
from stratagem.models.keras_model import KerasModule, imported_keras

MODEL_SUFFIXES = (".keras", ".h5")  # what keras.Model.save writes (".h5": Keras's legacy HDF5 format)
WEIGHTS_SUFFIX = ".weights.h5"  # what keras.Model.save_weights writes
LOADABLE_WEIGHTS = (WEIGHTS_SUFFIX, *MODEL_SUFFIXES)  # what keras.Model.load_weights reads


def keras_model_for(module: nn.Module, filepath: Any, *, suffixes: tuple[str, ...]) -> Any | None:
    """The Keras model inside ``module`` if ``filepath`` ends in one of ``suffixes``, else None (stratagem's format)."""
    if not isinstance(module, KerasModule) or not isinstance(filepath, (str, os.PathLike)):
        return None
    return module.keras_model if os.fspath(filepath).endswith(suffixes) else None


def save(keras_model: Any, filepath: Any, *, weights_only: bool, overwrite: bool, is_chief: bool) -> None:
    """Writes Keras's model (``.keras``/``.h5``) or weights (``.weights.h5``) file, on the chief, atomically."""
    target = Path(filepath)
    if not overwrite and target.exists():
        raise FileExistsError(f"{target} exists and overwrite=False. Pass overwrite=True or another path. "
                              f"Received: filepath={os.fspath(filepath)!r}")
    if not is_chief:  # NOTE: every replica holds the same weights; N writers of one file would interleave it
        return
    saving = imported_keras().saving  # type: ignore[union-attr]
    # keras.saving's functions, not the model's methods: a tf.keras model's save() comes back here.
    write = saving.save_weights if weights_only else saving.save_model
    # The temporary file ends in the target's suffix: Keras picks the format by it.
    atomic_write(target, lambda tmp: write(keras_model, tmp), suffix=WEIGHTS_SUFFIX if weights_only else target.suffix)


def load_weights(keras_model: Any, filepath: Any, **kwargs: Any) -> None:
    """Reads Keras's weights from a ``.weights.h5``, ``.keras`` or ``.h5`` file into ``keras_model``."""
    imported_keras().saving.load_weights(keras_model, filepath, **kwargs)  # type: ignore[union-attr]


__all__ = ["LOADABLE_WEIGHTS", "MODEL_SUFFIXES", "WEIGHTS_SUFFIX", "keras_model_for", "load_weights", "save"]
