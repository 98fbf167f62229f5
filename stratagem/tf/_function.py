"""``tf.function``: runs the Python function as written (eager torch), so it never changes a result.

``input_signature`` is checked against the call's tensors, as TF checks it; ``jit_compile``, ``autograph`` and the
other options only steer TF's tracing and change nothing here (torch.compile is the user's choice).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from stratagem.tf._tensor import TensorSpec


class Function:
    """What ``tf.function`` returns: a callable that runs ``python_function``; also a method when on a class."""

    def __init__(self, python_function: Callable[..., Any], input_signature: Sequence[Any] | None = None) -> None:
        self.python_function = python_function
        self.input_signature = None if input_signature is None else list(input_signature)
        functools.update_wrapper(self, python_function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.input_signature is not None:
            _check_signature(self.python_function, self.input_signature, args)
        return self.python_function(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Function:
        """This function (there is no graph to specialise: each call runs the Python code)."""
        return self

    def experimental_get_tracing_count(self) -> int:
        return 0


def function(func: Callable[..., Any] | None = None, input_signature: Sequence[Any] | None = None,
             autograph: bool = True, jit_compile: bool | None = None, reduce_retracing: bool = False,
             experimental_implements: Any = None, experimental_autograph_options: Any = None,
             experimental_attributes: Any = None, experimental_relax_shapes: Any = None,
             experimental_compile: Any = None, experimental_follow_type_hints: Any = None) -> Any:
    """``tf.function``: use as ``@tf.function``, ``@tf.function(...)`` or ``tf.function(fn, ...)``.

    Example:
        >>> import stratagem.tf as tf
        >>> @tf.function(jit_compile=True)
        ... def double(x):
        ...     return x * 2
        >>> int(double(tf.constant(3)))
        6
    """
    if func is None:
        return lambda inner: Function(inner, input_signature)
    return Function(func, input_signature)


def _check_signature(fn: Callable[..., Any], signature: list[Any], args: tuple[Any, ...]) -> None:
    # A method's `self` is not in the signature: compare the trailing arguments.
    values = args[len(args) - len(signature):] if len(args) > len(signature) else args
    if len(values) != len(signature):
        raise TypeError(f"{getattr(fn, '__name__', 'function')} takes {len(signature)} arguments per its "
                        f"input_signature. Received: {len(values)} arguments")
    for position, (value, spec) in enumerate(zip(values, signature)):
        if isinstance(spec, TensorSpec) and isinstance(value, torch.Tensor) and not spec.is_compatible_with(value):
            raise TypeError(f"Argument {position} of {getattr(fn, '__name__', 'function')} does not match its "
                            f"input_signature. Received: shape {tuple(value.shape)}, dtype {value.dtype}; "
                            f"expected {spec!r}")


def py_function(func: Callable[..., Any], inp: Sequence[Any], Tout: Any, name: str | None = None) -> Any:  # noqa: N803
    """``tf.py_function``: calls ``func(*inp)`` (everything is Python here) and converts the result to ``Tout``."""
    return _outputs(func(*inp), Tout)


def numpy_function(func: Callable[..., Any], inp: Sequence[Any], Tout: Any, stateful: bool = True,  # noqa: N803
                   name: str | None = None) -> Any:
    """``tf.numpy_function``: calls ``func`` on numpy arrays and converts the result to tensors of ``Tout``."""
    arrays = [value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value for value in inp]
    return _outputs(func(*arrays), Tout)


def _outputs(result: Any, Tout: Any) -> Any:  # noqa: N803
    if isinstance(Tout, (list, tuple)):
        values = result if isinstance(result, (list, tuple)) else [result]
        return [_as(value, dtype) for value, dtype in zip(values, Tout)]
    return _as(result, Tout)


def _as(value: Any, dtype: Any) -> Any:
    from stratagem.tf import dtypes
    from stratagem.tf._array_ops import cast
    from stratagem.tf._tensor import convert

    return convert(value, dtype) if dtypes.as_dtype(dtype) == dtypes.string else cast(value, dtype)
