"""``Model``, ``Sequential`` and the functional model of ``tf.keras``: Keras 3's classes, trained by stratagem.

Each is Keras's class with ``KerasTraining`` in front: ``compile``/``fit``/``evaluate``/``predict``/``save`` run through
``stratagem.Model``, the rest is Keras's. ``Model(inputs, outputs)`` (or a subclass passing them) is functional.
"""

from __future__ import annotations

from typing import Any

import keras

from stratagem.models.keras_internals import become_functional, is_functional_call, keras_functional_class
from stratagem.models.keras_training import KerasTraining

KerasFunctional = keras_functional_class()
_PACKAGE = "stratagem.tf.keras"  # the names .keras files record these classes under


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Model(KerasTraining, keras.Model):
    """``keras.Model`` whose training runs through stratagem (``tf.keras.Model``).

    Example:
        >>> import stratagem.tf as tf  # doctest: +SKIP
        >>> strategy = tf.distribute.MirroredStrategy()  # doctest: +SKIP
        >>> with strategy.scope():  # doctest: +SKIP
        ...     inputs = tf.keras.Input((28, 28, 1))
        ...     outputs = tf.keras.layers.Dense(10)(tf.keras.layers.Flatten()(inputs))
        ...     model = tf.keras.Model(inputs, outputs)
        ...     model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        >>> model.fit(x_train, y_train, batch_size=64)  # doctest: +SKIP
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Model and is_functional_call(args, kwargs):
            return super().__new__(Functional, *args, **kwargs)
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if is_functional_call(args, kwargs) and not isinstance(self, KerasFunctional):
            # A user's subclass called with (inputs, outputs): functional from now on, as Keras makes it.
            become_functional(type(self), Model, Functional)
        super().__init__(*args, **kwargs)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Functional(Model, KerasFunctional):  # type: ignore[misc, valid-type]  # Keras 3.15.1 does not export it
    """A functional ``tf.keras.Model`` (what ``tf.keras.Model(inputs, outputs)`` returns)."""


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Sequential(Model, keras.Sequential):
    """``keras.Sequential`` whose training runs through stratagem (``tf.keras.Sequential``)."""


__all__ = ["Functional", "Model", "Sequential"]
