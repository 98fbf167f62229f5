"""``KerasTraining``: a Keras 3 model whose ``compile``/``fit``/``evaluate``/``predict`` are ``stratagem.Model``'s.

Mixed into ``stratagem.tf.keras.Model`` (and its ``Sequential`` and functional forms) before ``keras.Model``, so a model
written as TF writes it trains through stratagem's one fit loop under its strategy. The model holds a
``stratagem.Model`` around itself (made at ``compile``, or at the first ``fit``/``evaluate``/``predict``, built on the
data's first rows as Keras does) and hands every call to it. This module never imports Keras.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from typing_extensions import override

from stratagem import optimizers as optimizers_lib
from stratagem._nest import map_structure
from stratagem.distribute import context
from stratagem.distribute.strategy import Strategy
from stratagem.models.data_adapter import unpack
from stratagem.models.keras_compile import from_keras
from stratagem.models.keras_model import imported_keras
from stratagem.models.model import Model

_STATE = "_stratagem_training"


@dataclasses.dataclass
class _Training:
    """What a Keras model trained by stratagem holds besides its layers."""

    strategy: Strategy | None  # the strategy whose scope the model was built or compiled in
    compile_kwargs: dict[str, Any] | None = None  # stratagem.Model.compile's arguments
    keras_config: dict[str, Any] | None = None  # Keras's compile arguments, for .keras files
    optimizer: Any = None  # the stratagem optimizer compile chose (model.optimizer before the trainer exists)
    trainer: Model | None = None
    stop_training: bool = False
    history: Any = None


class KerasTraining:
    """Routes a Keras model's training API to a ``stratagem.Model`` around it; put it before ``keras.Model``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._training_state()  # records the strategy in force while the layers are made

    def _training_state(self) -> _Training:
        state = self.__dict__.get(_STATE)
        if state is None:
            state = _Training(strategy=context.get_strategy() if context.has_strategy() else None)
            # Set past Keras's and torch's attribute tracking: this is no layer, weight or submodule.
            object.__setattr__(self, _STATE, state)
        return state

    # ---- compile ---------------------------------------------------------------------------------------------------
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, loss_weights: Any = None,
                metrics: Sequence[Any] | None = None, weighted_metrics: Sequence[Any] | None = None,
                run_eagerly: bool = False, steps_per_execution: int = 1, jit_compile: bool | str = "auto",
                auto_scale_loss: bool = True) -> None:
        """Keras's ``compile`` (Keras or stratagem objects and names); ``loss_weights`` is not implemented.

        ``run_eagerly`` is accepted (stratagem always runs eagerly).
        """
        if loss_weights is not None:
            raise ValueError("loss_weights is not implemented by stratagem's compile: a multi-output model's losses "
                             "are summed with weight 1. Weigh them in a custom loss, or override compute_loss. "
                             f"Received: loss_weights={loss_weights!r}")
        state = self._training_state()
        if context.has_strategy():
            state.strategy = context.get_strategy()
        keras_config = {"optimizer": optimizer, "loss": loss, "metrics": metrics, "weighted_metrics": weighted_metrics,
                        "run_eagerly": run_eagerly, "steps_per_execution": steps_per_execution,
                        "jit_compile": jit_compile}
        stratagem_optimizer, loss, metrics, weighted_metrics = from_keras(optimizer, loss, metrics, weighted_metrics)
        state.optimizer = optimizers_lib.get(stratagem_optimizer)
        state.compile_kwargs = {"optimizer": state.optimizer, "loss": loss, "metrics": metrics,
                                "weighted_metrics": weighted_metrics, "steps_per_execution": steps_per_execution,
                                "jit_compile": jit_compile, "auto_scale_loss": auto_scale_loss}
        state.trainer = None
        state.keras_config = keras_config if _serializable(keras_config) else None
        if self.built:  # type: ignore[attr-defined]
            self._trainer()

    # The base is Keras's Model, which this mixin joins: the type checker does not see it.
    @override  # Keras's saving calls it
    def get_compile_config(self) -> dict[str, Any] | None:  # type: ignore[misc]
        """Keras's compile arguments as a ``.keras`` file records them (None if not Keras objects and names)."""
        config = self._training_state().keras_config
        keras = imported_keras()
        return None if config is None else keras.saving.serialize_keras_object(config)  # type: ignore[union-attr]

    @override  # Keras's saving calls it
    def compile_from_config(self, config: dict[str, Any]) -> None:  # type: ignore[misc]
        """Compiles with the arguments a ``.keras`` file recorded (``keras.models.load_model`` calls it)."""
        keras = imported_keras()
        self.compile(**keras.saving.deserialize_keras_object(config))  # type: ignore[union-attr]

    # ---- fit / evaluate / predict: stratagem.Model's ------------------------------------------------------------
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: int | str = "auto", callbacks: Sequence[Any] | None = None, validation_split: float = 0.0,
            validation_data: Any = None, shuffle: bool = True, class_weight: dict[int, float] | None = None,
            sample_weight: Any = None, initial_epoch: int = 0, steps_per_epoch: int | None = None,
            validation_steps: int | None = None, validation_batch_size: int | None = None,
            validation_freq: int = 1) -> Any:
        """Keras's ``fit``, run by ``stratagem.Model.fit`` under this model's strategy (``batch_size`` is global)."""
        return self._trainer(x).fit(
            x, y, batch_size=batch_size, epochs=epochs, verbose=verbose, callbacks=callbacks,
            validation_split=validation_split, validation_data=validation_data, shuffle=shuffle,
            class_weight=class_weight, sample_weight=sample_weight, initial_epoch=initial_epoch,
            steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
            validation_batch_size=validation_batch_size, validation_freq=validation_freq)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None, verbose: int | str = "auto",
                 sample_weight: Any = None, steps: int | None = None, callbacks: Sequence[Any] | None = None,
                 return_dict: bool = False, **kwargs: Any) -> Any:
        """Keras's ``evaluate``, run by ``stratagem.Model.evaluate`` (metrics over every replica's examples)."""
        if kwargs:
            raise ValueError(f"evaluate() got arguments stratagem does not implement. Received: {sorted(kwargs)}")
        return self._trainer(x).evaluate(x, y, batch_size=batch_size, verbose=verbose, sample_weight=sample_weight,
                                         steps=steps, callbacks=callbacks, return_dict=return_dict)

    def predict(self, x: Any, batch_size: int | None = None, verbose: int | str = "auto", steps: int | None = None,
                callbacks: Sequence[Any] | None = None) -> Any:
        """Keras's ``predict``, run by ``stratagem.Model.predict`` (every input's output, in order)."""
        return self._trainer(x).predict(x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks)

    # ---- saving: Keras's files for Keras's suffixes, stratagem's otherwise (stratagem.Model decides) -------------
    def save(self, filepath: Any, overwrite: bool = True, **kwargs: Any) -> None:
        """``.keras``/``.h5``: Keras's file; any other path: stratagem's folder (``Model.save``). The chief writes."""
        self._trainer().save(filepath, overwrite=overwrite, **kwargs)

    def save_weights(self, filepath: Any, overwrite: bool = True, **kwargs: Any) -> None:
        """``.weights.h5``: Keras's file; any other path: stratagem's (safetensors or torch). The chief writes."""
        self._trainer().save_weights(filepath, overwrite=overwrite, **kwargs)

    def load_weights(self, filepath: Any, **kwargs: Any) -> None:
        """Loads what ``save_weights`` (or Keras) wrote; loading runs no code from the file."""
        self._trainer().load_weights(filepath, **kwargs)

    # ---- state Keras code reads ------------------------------------------------------------------------------------
    @property
    def optimizer(self) -> Any:
        """The optimizer that steps the weights: stratagem's, with Keras's update rule and ``learning_rate``."""
        state = self._training_state()
        return state.trainer.optimizer if state.trainer is not None else state.optimizer

    @optimizer.setter
    def optimizer(self, value: Any) -> None:
        self._training_state().optimizer = value

    @property
    def stop_training(self) -> bool:
        state = self._training_state()
        return state.trainer.stop_training if state.trainer is not None else state.stop_training

    @stop_training.setter
    def stop_training(self, value: bool) -> None:
        state = self._training_state()
        state.stop_training = bool(value)
        if state.trainer is not None:
            state.trainer.stop_training = bool(value)  # a Keras callback stops stratagem's loop

    @property
    def history(self) -> Any:
        state = self._training_state()
        return state.trainer.history if state.trainer is not None and state.trainer.history else state.history

    @history.setter
    def history(self, value: Any) -> None:
        self._training_state().history = value

    @property
    def distribute_strategy(self) -> Strategy:
        """The strategy this model trains with: the one whose scope it was built (or compiled) in."""
        state = self._training_state()
        if state.trainer is not None:
            return state.trainer.distribute_strategy
        return state.strategy or context.get_strategy()

    # ---- internals ------------------------------------------------------------------------------------------------
    def _trainer(self, data: Any = None) -> Model:
        """The ``stratagem.Model`` that trains this model, made (and compiled) on first use."""
        state = self._training_state()
        if state.trainer is not None:
            return state.trainer
        if not self.built:  # type: ignore[attr-defined]
            self._build_on(data)
        strategy = state.strategy or context.get_strategy()
        with strategy.scope():  # the strategy binds here: stratagem.Model reads the scope it is made in
            trainer = Model(self)  # type: ignore[arg-type]
            trainer._facade = self  # Keras callbacks see this object as their model
            if state.compile_kwargs is not None:
                trainer.compile(**state.compile_kwargs)
        trainer.stop_training = state.stop_training
        state.trainer = trainer
        return trainer

    def _build_on(self, data: Any) -> None:
        """Creates the weights by calling the model on the first rows of ``data``, as Keras's ``fit`` builds it."""
        sample = _first_rows(data)
        if sample is None:
            raise ValueError(
                f"Model {self.name!r} has no weights yet (a subclassed model, or a Sequential without an Input) "  # type: ignore[attr-defined]
                "and stratagem cannot take a first batch from this input to build it. Call the model once on a "
                "batch (`model(x[:1])`) inside strategy.scope() before fit/evaluate/predict/save. "
                f"Received: x of type {type(data).__name__}")
        self(sample)  # type: ignore[operator]


def _first_rows(data: Any) -> Any:
    """A one-row (or one-batch) ``x`` from arrays, a dict of arrays or a ``stratagem.data.Dataset``; else None."""
    import numpy as np
    import torch

    from stratagem.data.dataset import Dataset

    def head(leaf: Any) -> Any:
        return leaf[:1] if isinstance(leaf, (np.ndarray, torch.Tensor)) else leaf

    if isinstance(data, (np.ndarray, torch.Tensor)) or (isinstance(data, (dict, list, tuple)) and data):
        return map_structure(head, data)
    if isinstance(data, Dataset):
        return unpack(next(iter(data.take(1))))[0]
    return None


def _serializable(config: dict[str, Any]) -> bool:
    """True if every compile argument is None, a name or a Keras object (what a ``.keras`` file can record)."""
    keras = imported_keras()

    def plain(value: Any) -> bool:
        if isinstance(value, (list, tuple)):
            return all(plain(v) for v in value)
        if isinstance(value, dict):
            return all(plain(v) for v in value.values())
        keras_types = (keras.optimizers.Optimizer, keras.losses.Loss, keras.metrics.Metric)  # type: ignore[union-attr]
        return value is None or isinstance(value, (str, bool, int, float, *keras_types))

    return keras is not None and plain(config)


__all__ = ["KerasTraining"]
