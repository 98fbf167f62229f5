"""Checks of ``fit``'s plain arguments (counts, flags, callbacks, class weights), before any data is read.

Keras 3 lets many of these through to fail later with a raw ``TypeError`` or ``ZeroDivisionError``, or to train
silently wrong (a negative ``epochs`` runs nothing, ``validation_freq=-1`` never validates). Each check here names
the argument, what it must be and the fix. The data itself (``x``, ``y``, ``batch_size`` ranges,
``steps_per_epoch``) is checked where it is read.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

VERBOSE_VALUES = ("auto", 0, 1, 2)


def check_fit_arguments(x: Any, *, epochs: Any, initial_epoch: Any, verbose: Any, shuffle: Any, callbacks: Any,
                        batch_size: Any, validation: Mapping[str, Any], class_weight: Any) -> None:
    """Raises ``TypeError``/``ValueError`` naming the first bad argument of ``fit``.

    ``validation`` holds ``validation_data``, ``validation_freq``, ``validation_steps`` and
    ``validation_batch_size``.
    """
    if x is None:
        raise ValueError("fit needs training data, but x is None. Pass x (and y) as arrays or tensors, or x as a "
                         "dataset of (x, y) batches. Received: x=None")
    _count("epochs", epochs, minimum=0, fix="Pass the number of epochs to train, e.g. epochs=10")
    _count("initial_epoch", initial_epoch, minimum=0, fix="Pass the epoch to resume at (0 to start afresh)")
    if isinstance(verbose, bool) or verbose not in VERBOSE_VALUES:
        raise ValueError(f"verbose must be 'auto', 0 (silent), 1 (progress bar) or 2 (one line per epoch), as in "
                         f"Keras. Received: verbose={verbose!r}")
    if not isinstance(shuffle, bool) and shuffle != "batch":
        raise TypeError(f"shuffle must be True or False (or 'batch', as Keras). Pass a bool. Received: shuffle={shuffle!r}")
    _check_callbacks(callbacks)
    if batch_size is not None:
        _count("batch_size", batch_size, minimum=None, fix="Pass the global batch size as an int, e.g. batch_size=32")
    _check_validation(**validation)
    _check_class_weight(class_weight)


def check_steps(steps: Any, *, steps_name: str) -> int | None:
    """Returns ``steps`` (``steps_per_epoch``, ``steps``) as Keras 3 reads it: None or 0 is one whole pass.

    Keras 3 tests ``if steps:``, so ``steps_per_epoch=0`` (a ``len(x) // batch`` that came out 0) trains a whole
    epoch there; here it does the same rather than train nothing.

    Raises:
        TypeError: If ``steps`` is not an int (a float, a string).
        ValueError: If ``steps`` is negative.
    """
    if steps is None:
        return None
    _count(steps_name, steps, minimum=0, fix=f"Pass the number of batches, or None for one whole pass")
    return int(steps) or None


def _count(name: str, value: Any, *, minimum: int | None, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int. {fix}. Received: {name}={value!r} of type {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}. {fix}. Received: {name}={value}")


def _check_callbacks(callbacks: Any) -> None:
    if callbacks is None:
        return
    if not isinstance(callbacks, Sequence) or isinstance(callbacks, str):
        raise TypeError("callbacks must be a list of Callback objects; a single callback goes in a list, "
                        f"callbacks=[cb]. Received: callbacks of type {type(callbacks).__name__}")
    for index, callback in enumerate(callbacks):
        if not callable(getattr(callback, "set_model", None)):
            raise TypeError(f"callbacks[{index}] is not a Callback (it has no set_model). Pass Callback instances, "
                            f"e.g. stratagem.callbacks.EarlyStopping(). Received: callbacks[{index}]={callback!r}")


def _check_validation(*, validation_data: Any, validation_freq: Any, validation_steps: Any,
                      validation_batch_size: Any) -> None:
    _count("validation_freq", validation_freq, minimum=1,
           fix="Pass how many epochs to train between validations (1: every epoch)")
    if validation_steps is not None:
        _count("validation_steps", validation_steps, minimum=1,
               fix="Pass the number of validation batches, or None to use all")
    if validation_batch_size is not None:
        _count("validation_batch_size", validation_batch_size, minimum=1,
               fix="Pass the global validation batch size, or None to use batch_size")
    if isinstance(validation_data, tuple) and len(validation_data) == 1 or _is_array(validation_data):
        raise ValueError("validation_data has no labels, so no validation loss can be computed. Pass "
                         "(x_val, y_val), (x_val, y_val, sample_weight_val) or a dataset of (x, y) batches. "
                         f"Received: validation_data of type {type(validation_data).__name__}")


def _is_array(value: Any) -> bool:
    # numpy arrays and tensors: data without labels; datasets and iterables of batches carry them.
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _check_class_weight(class_weight: Any) -> None:
    if class_weight is None:
        return
    if not isinstance(class_weight, Mapping):
        raise TypeError("class_weight must be a dict mapping class indices to weights, e.g. {0: 1.0, 1: 5.0}. "
                        f"Received: class_weight of type {type(class_weight).__name__}")
    for key, weight in class_weight.items():
        if isinstance(key, bool) or not isinstance(key, numbers.Integral) or key < 0:
            raise ValueError("class_weight keys are class indices (ints >= 0), as the labels' values. "
                             f"Use integer keys. Received: class_weight key {key!r}")
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise TypeError(f"class_weight values are weights (numbers). Received: class_weight[{key}]={weight!r}")
