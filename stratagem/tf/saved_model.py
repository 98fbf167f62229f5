"""``tf.saved_model``: ``save``/``load`` on stratagem's export (``stratagem.models.saving``).

``save`` writes ``Model.save``'s folder (safetensors weights, a ``torch.export`` program, metadata), atomically, on the
chief only; ``load`` reads it back without running code from it, as a ``LoadedModel`` called like TF's (``loaded(x)``).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from stratagem.distribute import context
from stratagem.models.model import Model
from stratagem.models.saving import LoadedModel, load_model, save_model
from stratagem.tf._refusal import module_getattr


class SaveOptions:
    """``tf.saved_model.SaveOptions``: accepted; the export has no options to set."""

    def __init__(self, **kwargs: Any) -> None:
        self.options = kwargs


class LoadOptions:
    """``tf.saved_model.LoadOptions``: accepted; loading has no options to set."""

    def __init__(self, **kwargs: Any) -> None:
        self.options = kwargs


def save(obj: Any, export_dir: str | os.PathLike[str], signatures: Any = None, options: SaveOptions | None = None) -> None:
    """Exports ``obj`` (a ``stratagem.Model`` or a built Keras model) to ``export_dir``; only the chief writes.

    Every replica may call it.

    Raises:
        ValueError: If ``signatures`` is given (one entry point: the model's call), or the input shapes are unknown.
        TypeError: If ``obj`` is neither a ``stratagem.Model`` nor a Keras model.
    """
    if signatures is not None:
        raise ValueError("tf.saved_model.save(signatures=...) is not provided: stratagem's export has one entry "
                         "point, the model's call on a batch. Remove signatures. Received: signatures given")
    model, example = _exportable(obj)
    distributed = context.distributed_strategy()
    if distributed is not None and not distributed.is_chief:
        return  # NOTE: replicas hold the same weights; one writer, as Model.save does
    save_model(model, export_dir, input_example=example)


def load(export_dir: str | os.PathLike[str], tags: Any = None, options: LoadOptions | None = None) -> LoadedModel:
    """Loads a folder written by ``save`` (or ``Model.save``) without running code from it."""
    return load_model(export_dir)


def contains_saved_model(export_dir: str | os.PathLike[str]) -> bool:
    """Whether ``export_dir`` holds a model written by ``save``."""
    from stratagem.models.saving import METADATA_FILE

    return os.path.isfile(os.path.join(os.fspath(export_dir), METADATA_FILE))


def _exportable(obj: Any) -> tuple[Model, Any]:
    if isinstance(obj, Model):
        return obj, None
    import sys

    keras = sys.modules.get("keras")
    if keras is None or not isinstance(obj, keras.Layer):
        raise TypeError("tf.saved_model.save exports a stratagem.Model or a Keras model. "
                        f"Received: obj of type {type(obj).__name__}")
    inputs = getattr(obj, "inputs", None)
    if not inputs:
        raise ValueError(f"tf.saved_model.save needs the shapes of {obj.name!r}'s inputs, and it has no "
                         "keras.Input: wrap it, stratagem.Model(model), and call model.save(path, input_example=x). "
                         "Received: inputs=None")
    # A batch of 2: torch.export would fix a batch axis of size 1 as a constant.
    examples = [torch.zeros((2, *[d or 1 for d in tensor.shape[1:]]), dtype=getattr(torch, str(tensor.dtype)))
                for tensor in inputs]
    return Model(obj), examples[0] if len(examples) == 1 else examples


__getattr__ = module_getattr("tf.saved_model")
__all__ = ["LoadOptions", "SaveOptions", "contains_saved_model", "load", "save"]
