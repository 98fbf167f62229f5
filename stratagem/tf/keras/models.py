"""``tf.keras.models``: the model classes trained by stratagem, and loading by file kind.

``load_model`` reads a ``.keras``/``.h5`` file with Keras in safe mode (as ``tf.keras`` classes) and any other path as
stratagem's saved-model folder (a ``torch.export`` program with ``predict``).
"""

from __future__ import annotations

import os
from typing import Any

from keras.models import clone_model, model_from_json
import keras

from stratagem.models import saving
from stratagem.models.keras_saving import MODEL_SUFFIXES
from stratagem.tf._refusal import module_getattr
from stratagem.tf.keras._models import Model, Sequential

__all__ = ["Model", "Sequential", "clone_model", "load_model", "model_from_json", "save_model"]


def load_model(filepath: Any, custom_objects: dict[str, Any] | None = None, compile: bool = True,
               safe_mode: bool = True) -> Any:
    """Loads ``model.save``'s Keras file (``.keras``/``.h5``) or stratagem folder (Keras-only arguments: ValueError)."""
    if os.fspath(filepath).endswith(MODEL_SUFFIXES):
        return keras.saving.load_model(filepath, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode)
    if custom_objects:
        raise ValueError("A stratagem saved-model folder loads without Python classes, so custom_objects has no use "
                         f"there. Remove it. Received: custom_objects={sorted(custom_objects)}")
    return saving.load_model(filepath)


def save_model(model: Any, filepath: Any, overwrite: bool = True, **kwargs: Any) -> None:
    """``model.save(filepath)``: Keras's file for ``.keras``/``.h5``, else stratagem's folder (the chief writes)."""
    model.save(filepath, overwrite=overwrite, **kwargs)
__getattr__ = module_getattr("tf.keras.models")
