"""``tf.Variable``: a Keras 3 variable (torch backend) with TF's constructor and read/assign methods.

NOTE: a ``tf.Variable`` IS a ``keras.Variable``, so Keras optimizers and layers, checkpoints and torch ops take it. Its
initial value converts as ``tf.constant``'s. An integer or bool variable reports ``trainable=False`` (torch gives
gradients to floats only); TF reports True but never differentiates it either.
"""

from __future__ import annotations

import enum
from typing import Any

import keras
import torch

from stratagem.tf import dtypes
from stratagem.tf._tensor import convert


class VariableAggregation(str, enum.Enum):
    """``tf.VariableAggregation``: how replicas' updates of a variable combine."""

    NONE = "none"
    SUM = "sum"
    MEAN = "mean"
    ONLY_FIRST_REPLICA = "only_first_replica"


class VariableSynchronization(str, enum.Enum):
    """``tf.VariableSynchronization``: when a variable is synchronized across replicas."""

    AUTO = "auto"
    NONE = "none"
    ON_WRITE = "on_write"
    ON_READ = "on_read"


class Variable(keras.Variable):
    """``tf.Variable``: mutable state; ``assign``/``assign_add``/``assign_sub`` update it in place.

    Args:
        initial_value: A tensor, numpy array, Python value, or a callable returning one.
        trainable: Whether optimizers and ``GradientTape`` see it (default True for floating dtypes).
        name: The variable's name (Keras refuses a ``/`` in it).
        dtype: The dtype; the initial value's own (TF's conversion) if None.
        shape: Checked against the initial value's shape when given.
        aggregation: A ``tf.VariableAggregation`` (or its string).
        synchronization: A ``tf.VariableSynchronization`` (or its string).

    Example:
        >>> import stratagem.tf as tf
        >>> v = tf.Variable([1.0, 2.0])
        >>> v.assign_add([1.0, 1.0]).numpy().tolist()
        [2.0, 3.0]
    """

    def __init__(self, initial_value: Any = None, trainable: bool | None = None, validate_shape: bool = True,
                 caching_device: Any = None, name: str | None = None, variable_def: Any = None, dtype: Any = None,
                 import_scope: Any = None, constraint: Any = None,
                 synchronization: VariableSynchronization | str = VariableSynchronization.AUTO,
                 aggregation: VariableAggregation | str = VariableAggregation.NONE, shape: Any = None,
                 **_: Any) -> None:
        if initial_value is None:
            raise ValueError("tf.Variable needs an initial_value. Received: initial_value=None")
        if callable(initial_value):
            initial_value = initial_value()
        value = convert(initial_value, dtype)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"tf.Variable holds numbers; strings are not provided. Received: {initial_value!r}")
        if shape is not None and validate_shape and not _shape_matches(value.shape, shape):
            raise ValueError(f"initial_value's shape does not match shape. Received: initial_value shape "
                             f"{tuple(value.shape)}, shape={tuple(shape)}")
        floating = value.dtype.is_floating_point or value.dtype.is_complex
        super().__init__(value, dtype=dtypes.as_dtype(value.dtype).name,
                         trainable=floating and (trainable is None or bool(trainable)), autocast=False,
                         aggregation=VariableAggregation(aggregation).value,
                         synchronization=VariableSynchronization(synchronization).value,
                         name=name or "Variable", constraint=constraint)

    @property
    def dtype(self) -> dtypes.DType:  # type: ignore[override]
        """A ``tf.DType`` (it also equals the Keras dtype string, ``"float32"``)."""
        return dtypes.as_dtype(self._dtype)

    @property
    def device(self) -> str:
        return str(self.value.device)

    def read_value(self) -> torch.Tensor:
        """The current value, as a tensor that later assignments do not change (gradients flow to the variable)."""
        return self.value.clone()

    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Variable:
        super().assign(_matching(value, self))
        return self

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Variable:
        super().assign_add(_matching(delta, self))
        return self

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Variable:
        super().assign_sub(_matching(delta, self))
        return self

    def __repr__(self) -> str:
        return (f"<tf.Variable '{self.name}' shape={tuple(self.shape)} dtype={self.dtype.name}, "
                f"numpy={self.numpy()!r}>")


def _matching(value: Any, variable: Variable) -> torch.Tensor:
    # TF converts Python values to the variable's dtype and refuses a tensor of another dtype.
    return convert(value, variable.dtype).to(variable.value.device)


def _shape_matches(actual: torch.Size, expected: Any) -> bool:
    wanted = list(expected)
    return len(actual) == len(wanted) and all(w is None or w == a for a, w in zip(actual, wanted))
