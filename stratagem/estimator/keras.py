"""``model_to_estimator``: an Estimator around a compiled ``stratagem.Model`` (or a Keras 3 model it wraps).

As TF's version clones the Keras model into the Estimator's graph, the
Estimator here makes a new ``Model`` over the same module for each strategy
it runs under, compiled with copies of the given model's loss and metrics,
so training goes through ``Model.train_step`` and the strategy's module wrap.
The given model keeps its weights in step (the module is shared).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

from stratagem.estimator.estimator import Estimator
from stratagem.estimator.run_config import RunConfig
from stratagem.estimator.specs import ModeKeys
from stratagem.models import Model
from stratagem.models.keras_model import imported_keras, is_keras_layer


class _ModelEstimator(Estimator):
    """An Estimator whose model is a compiled ``Model`` rather than a ``model_fn``."""

    def __init__(self, model: Model, model_dir: str | os.PathLike[str] | None, config: RunConfig | None) -> None:
        super().__init__(None, model_dir=model_dir, config=config)
        self._source = model

    def _build_model(self, mode: ModeKeys, first_batch: Callable[[], Any]) -> Model:
        source = self._source
        assert source.compiled_metrics is not None
        model = Model(source.module, name=source.name)  # bound to the strategy in scope (Estimator._model)
        compiled = source.compiled_metrics
        loss = source.compiled_loss.loss if source.compiled_loss is not None else None
        # A shallow copy: compile rebuilds its torch optimizer over the module. It steps only in TRAIN; other modes compile with the default (never stepped), so
        # the training model's optimizer (and its checkpointed state) is never rebuilt under it.
        optimizer = copy.copy(source.optimizer) if mode == ModeKeys.TRAIN else "rmsprop"
        model.compile(optimizer=optimizer, loss=loss, metrics=copy.deepcopy(compiled.unweighted),
                      weighted_metrics=copy.deepcopy(compiled.weighted))
        return model


def model_to_estimator(keras_model: Any = None, keras_model_path: str | None = None, custom_objects: Any = None,
                       model_dir: str | os.PathLike[str] | None = None, config: RunConfig | None = None,
                       checkpoint_format: str | None = None) -> Estimator:
    """``tf.keras.estimator.model_to_estimator``: an ``Estimator`` that trains a compiled model.

    Args:
        keras_model: A compiled Keras 3 model (torch backend), or a compiled
            ``stratagem.Model`` (wrapping a torch module or a Keras model).
        model_dir: Checkpoint folder (or ``config.model_dir``).
        config: A ``RunConfig``; ``train_distribute`` is the strategy to train under.

    Raises:
        ValueError: If the model is not compiled, or for ``keras_model_path``
            (TF's HDF5 files do not exist here).
        TypeError: If ``keras_model`` is not a ``stratagem.Model``.

    Example:
        >>> model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])  # doctest: +SKIP
        >>> config = RunConfig(train_distribute=MirroredStrategy(num_replicas=2))  # doctest: +SKIP
        >>> estimator = model_to_estimator(model, config=config)  # doctest: +SKIP
    """
    if keras_model_path is not None or checkpoint_format not in (None, "checkpoint"):
        raise ValueError("keras_model_path (an HDF5 file) and checkpoint_format are TF file formats; pass the compiled "
                         f"model as keras_model. Received: keras_model_path={keras_model_path!r}, "
                         f"checkpoint_format={checkpoint_format!r}")
    from stratagem.models.keras_training import KerasTraining

    if isinstance(keras_model, KerasTraining):  # a stratagem.tf.keras model: the stratagem.Model its compile made
        keras_model = keras_model._trainer()
    elif is_keras_layer(keras_model):
        keras_model = _from_compiled_keras(keras_model)
    if not isinstance(keras_model, Model):
        raise TypeError("model_to_estimator takes a compiled Keras 3 model or a compiled stratagem.Model; wrap a torch "
                        "module as stratagem.Model(module) and compile it first. "
                        f"Received: keras_model of type {type(keras_model).__name__}")
    if keras_model.compiled_metrics is None or keras_model.optimizer is None:
        raise ValueError("The given model has not been compiled yet; call compile(optimizer=..., loss=..., "
                         "metrics=...) before model_to_estimator (TF asks the same).")
    return _ModelEstimator(keras_model, model_dir, config)


def _from_compiled_keras(keras_model: Any) -> Model:
    """``stratagem.Model(keras_model)`` compiled with what ``keras_model.compile`` was given (TF's reading)."""
    if not getattr(keras_model, "compiled", False):
        raise ValueError("The given Keras model has not been compiled yet; call compile(optimizer=..., loss=..., "
                         "metrics=...) before model_to_estimator (TF asks the same).")
    keras = imported_keras()
    assert keras is not None  # a Keras model exists, so Keras is imported
    config = keras_model.get_compile_config()  # public and serialised: objects come back as fresh copies

    def revive(value: Any) -> Any:
        if isinstance(value, dict) and "class_name" in value:
            return keras.saving.deserialize_keras_object(value)
        return [revive(v) for v in value] if isinstance(value, list) else value

    model = Model(keras_model)
    model.compile(optimizer=revive(config["optimizer"]), loss=revive(config["loss"]),
                  metrics=revive(config.get("metrics")), weighted_metrics=revive(config.get("weighted_metrics")))
    return model
