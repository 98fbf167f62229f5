"""``model_to_estimator``: an Estimator around a compiled ``stratagem.Model`` (or a Keras 3 model it wraps).

As TF's clones the Keras model, the Estimator makes a new ``Model`` over the same module (so the given model's
weights stay in step) for each strategy, compiled with copies of its loss and metrics, and trains through
``Model.train_step``. A features dict reaches a Keras model's inputs by name, as TF fed them (``_input_order``).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from typing import Any

from typing_extensions import override

from stratagem.estimator._input import call_input_fn
from stratagem.estimator.estimator import Estimator
from stratagem.estimator.run_config import RunConfig
from stratagem.estimator.specs import ModeKeys
from stratagem.models import Model
from stratagem.models.keras_model import KerasModule, imported_keras, is_keras_layer

# Keras 3 names an unnamed Input "input_layer", "input_layer_1", ...; Keras 2 (TF's tf.keras up to 2.15, where
# model_to_estimator lived) counted the same Inputs as "input_1", "input_2", ...
_KERAS3_AUTO_INPUT = re.compile(r"input_layer(?:_(\d+))?")


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
        # A shallow copy: compile rebuilds its torch optimizer over the module. It steps only in TRAIN; other modes
        # compile with the default (never stepped), so the training model's optimizer (and its checkpointed state) is
        # never rebuilt under it.
        optimizer = copy.copy(source.optimizer) if mode == ModeKeys.TRAIN else "rmsprop"
        model.compile(optimizer=optimizer, loss=loss, metrics=copy.deepcopy(compiled.unweighted),
                      weighted_metrics=copy.deepcopy(compiled.weighted))
        return model

    @override
    def _input(self, input_fn: Callable[..., Any], mode: ModeKeys, strategy: Any) -> Any:
        order = _input_order(self._source.module)
        if order is None:
            return super()._input(input_fn, mode, strategy)

        def by_name(features: Any, *rest: Any) -> Any:
            inputs = _ordered_features(features, order)
            # (inputs,) for features alone: a bare list of several inputs would read as (x, y).
            return (inputs, *rest)

        return strategy.distribute_datasets_from_function(
            lambda context: call_input_fn(input_fn, context, mode=mode, params=self._params,
                                          config=self._config).map(by_name))


def _input_order(module: Any) -> list[tuple[str, ...]] | None:
    """Each input's accepted feature keys, in the model's input order; None where a dict goes in unchanged.

    A functional model built on a list of inputs takes its features dict by input layer name, TF's ``input_names``
    rule, which Keras 3 itself cannot (``Functional.call`` matches dict keys against the tensor's name,
    "keras_tensor", while its input check wants the layer's). An unnamed input also answers to its Keras 2 name
    ("input_1" for Keras 3's "input_layer"), the key TF-era scripts use.
    """
    keras_model = module.keras_model if isinstance(module, KerasModule) else None
    try:
        built_on_dict = isinstance(getattr(keras_model, "input", None), dict)
    except ValueError:  # a layer with no single input
        return None
    specs = getattr(keras_model, "input_spec", None)  # a functional model's inputs, named by layer, in order
    if built_on_dict or not isinstance(specs, list) or not specs or not all(spec.name for spec in specs):
        return None  # Keras maps a dict itself (built on a dict), or the model has no named inputs (subclassed)
    order: list[tuple[str, ...]] = []
    for spec in specs:
        auto = _KERAS3_AUTO_INPUT.fullmatch(spec.name)
        order.append((spec.name, f"input_{int(auto.group(1) or 0) + 1}") if auto else (spec.name,))
    return order


def _ordered_features(features: Any, order: list[tuple[str, ...]]) -> Any:
    """The model's inputs from a features dict (one tensor for a one-input model); anything else unchanged."""
    if not isinstance(features, dict):
        return features
    inputs = []
    for names in order:
        found = [name for name in names if name in features]
        if not found:
            raise KeyError(
                "The features dict has no entry for one of the Keras model's inputs; key each input by its layer "
                f"name, as TF's model_to_estimator did. Expected keys: {[names[0] for names in order]} (an unnamed "
                f"input also takes Keras 2's name, e.g. 'input_1'). Received: keys={sorted(features)}")
        inputs.append(features[found[0]])
    # A tuple: tf.data (and stratagem.data's map) makes a nested list one tensor.
    return inputs[0] if len(inputs) == 1 else tuple(inputs)


def model_to_estimator(keras_model: Any = None, keras_model_path: str | None = None, custom_objects: Any = None,
                       model_dir: str | os.PathLike[str] | None = None, config: RunConfig | None = None,
                       checkpoint_format: str | None = None) -> Estimator:
    """``tf.keras.estimator.model_to_estimator``: an ``Estimator`` that trains a compiled model.

    Args:
        keras_model: A compiled Keras 3 model (torch backend), or a compiled ``stratagem.Model`` (wrapping a torch
            module or a Keras model).
        model_dir: Checkpoint folder (or ``config.model_dir``).
        config: A ``RunConfig``; ``train_distribute`` is the strategy to train under.

    Raises:
        ValueError: If the model is not compiled, or for ``keras_model_path`` (TF's HDF5 files do not exist here).
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
