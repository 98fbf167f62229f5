"""A per-element ``map`` function called once on a whole batch, with per-element semantics by construction.

``call_per_row(fn, batch)`` runs ``fn`` under ``torch.func.vmap`` (torch 2.13), which gives every row the
computation one element would get: a reduction covers one row, a Python branch on a tensor's value
(``if x.min() < 5``), ``.item()``, ``float(x)``, ``.numpy()``/``np.asarray`` and an output whose shape depends on
values all raise, and so does a torch random op (``randomness="error"``). Whatever raises, or returns anything
but tensors, gives ``None`` and the caller computes per element. So no check of rows is needed: a function that
could differ on row 7 of batch 3 cannot run under vmap at all.

What vmap does not see, and what is checked instead:

- Inputs that reach ``fn`` per element as numpy arrays reach the vmapped call as torch tensors, and numpy and
  torch can disagree (``uint8 / 255.`` is float64 in numpy, float32 in torch; ``.repeat`` means different
  things). So while ``fn`` runs, a torch-function mode watches those raw inputs: a torch op applied to one
  must come through ``stratagem.tf``'s ops (which convert a numpy array and a tensor alike, keeping the dtype),
  never from the user's own code, Keras or numpy; else ``None``. ``tf.constant`` and ``tf.convert_to_tensor``
  convert numpy and tensors differently when given a dtype, so inputs passed to them also give ``None``.
- Python-level randomness: a draw from ``random`` or ``np.random``'s global generators during the call gives
  ``None`` (one draw per batch is not one per element), and both generators are put back as they were.
- The caller compares one element computed per element with row 0 (structure, types, dtypes, shapes,
  values) the first time; this catches a function that returns its numpy input unchanged, or one that asks
  ``isinstance(x, np.ndarray)`` (Python has no hook for that) and differs on every element.

Not the same as per element, by design (TF traces a map function once and runs its Python once): Python side
effects (a counter, a list append, a generator object of the user's) run once per batch.
"""

from __future__ import annotations

import os
import random
import sys
import types
from typing import Any

import numpy as np
import torch
from torch.func import vmap
from torch.overrides import TorchFunctionMode

from stratagem._nest import map_structure
from stratagem.data._python_values import map_output
from stratagem.data._structure import call_with_element, leaves

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_STRATAGEM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TF_DIR = os.path.join(_STRATAGEM_DIR, "tf") + os.sep
# stratagem.tf ops that treat a numpy input and a tensor differently when given a dtype (see the module docstring).
_TYPE_SENSITIVE = ("constant", "convert_to_tensor")


class NotPerRow(Exception):
    """Raised inside the vmapped call when ``fn`` touches a raw numpy-born input outside ``stratagem.tf`` ops."""


def call_per_row(fn: Any, batch: Any, num_rows: int) -> Any | None:
    """``fn`` on every row of ``batch`` in one call, as a batch of ``num_rows`` rows; ``None`` where it cannot be.

    ``fn`` takes an element (a tuple element is unpacked, as ``map`` does) and returns tensors; ``batch`` is the
    elements' rows stacked (numpy arrays or tensors). The result's leaves are contiguous tensors that share no
    memory with ``batch`` (as stacked per-element results would be).
    """
    parts = leaves(batch)
    if not parts or not all(_is_rows(leaf, num_rows) for leaf in parts):
        return None
    try:
        inputs = map_structure(_as_tensor, batch)
    except (TypeError, ValueError):  # a numpy dtype torch has no tensor for
        return None
    numpy_born = any(isinstance(leaf, np.ndarray) for leaf in parts)
    guard = _RawInputGuard() if numpy_born else None

    def rows(*args: Any) -> Any:
        if guard is None:
            return fn(*args)
        guard.watch(leaves(args))
        with guard:
            return fn(*args)

    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        result = map_output(call_with_element(vmap(rows, randomness="error"), inputs))
    except Exception:  # noqa: BLE001  (whatever vmap refuses, or fn raises on a batch: the per-element path decides)
        return None
    if random.getstate() != python_state or not _same_numpy_state(numpy_state, np.random.get_state()):
        random.setstate(python_state)  # the per-element calls that run instead draw what they would have drawn
        np.random.set_state(numpy_state)
        return None
    outputs = leaves(result)
    if not outputs or not all(isinstance(leaf, torch.Tensor) and leaf.ndim >= 1 and leaf.shape[0] == num_rows
                              for leaf in outputs):
        return None
    held = {leaf.untyped_storage().data_ptr() for leaf in leaves(inputs)}
    return map_structure(lambda leaf: leaf.clone(memory_format=torch.contiguous_format)
                         if leaf.untyped_storage().data_ptr() in held else leaf.contiguous(), result)


def _is_rows(leaf: Any, num_rows: int) -> bool:
    if isinstance(leaf, torch.Tensor):
        return leaf.ndim >= 1 and leaf.shape[0] == num_rows and not leaf.requires_grad
    return isinstance(leaf, np.ndarray) and leaf.ndim >= 1 and leaf.shape[0] == num_rows and leaf.dtype.kind in "biufc"


def _as_tensor(leaf: Any) -> torch.Tensor:
    if isinstance(leaf, torch.Tensor):
        return leaf
    return torch.from_numpy(leaf if leaf.flags.writeable and leaf.flags.aligned else leaf.copy())


def _same_numpy_state(before: Any, after: Any) -> bool:
    return bool(before[0] == after[0] and np.array_equal(before[1], after[1]) and before[2:] == after[2:])


class _RawInputGuard(TorchFunctionMode):
    """Raises ``NotPerRow`` when a torch op takes a watched input and was not called through ``stratagem.tf``."""

    def __init__(self) -> None:
        super().__init__()
        self._raw: set[int] = set()

    def watch(self, inputs: list[Any]) -> None:
        self._raw = {id(leaf) for leaf in inputs}

    def __torch_function__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._takes_raw(args) or self._takes_raw(tuple(kwargs.values())):
            if not _called_through_tf_ops(sys._getframe(1)):
                raise NotPerRow(f"{getattr(func, '__name__', func)} on a numpy-born input outside stratagem.tf ops")
        return func(*args, **kwargs)

    def _takes_raw(self, values: tuple[Any, ...]) -> bool:
        for value in values:
            if id(value) in self._raw:
                return True
            if isinstance(value, (list, tuple)) and self._takes_raw(tuple(value)):
                return True
        return False


def _called_through_tf_ops(frame: types.FrameType | None) -> bool:
    """Whether the call stack from ``frame`` up reaches the user's code through a ``stratagem.tf`` op.

    torch's own frames are skipped, stratagem's are followed; the first frame outside both is the caller
    (the user's function, Keras, numpy). True if a ``stratagem.tf`` frame came before it and none of them was
    a type-sensitive conversion.
    """
    through_tf = False
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(_TORCH_DIR):
            pass
        elif path.startswith(_TF_DIR):
            if frame.f_code.co_name in _TYPE_SENSITIVE:
                return False
            through_tf = True
        elif path == __file__ or not path.startswith(_STRATAGEM_DIR):
            return through_tf  # this module's frame: fn was itself a stratagem.tf op
        frame = frame.f_back
    return False
