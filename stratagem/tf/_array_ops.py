"""TF's top-level tensor-building and shape ops (``tf.constant``, ``tf.cast``, ``tf.reshape`` ...) on torch.

Each converts its inputs as TF does and returns TF's dtypes (``tf.range(5)`` and ``tf.shape(x)`` int32, ``tf.where``
int64), and ``tf.one_hot`` gives zeros for an index out of range. The arithmetic and reductions live in
``stratagem.tf.math``.
"""

from __future__ import annotations

import builtins
import functools
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

import stratagem
from stratagem.tf import dtypes
from stratagem.tf._tensor import convert, is_tensor, operands, tensor


def _dims(shape: Any) -> list[int]:
    return [int(d) for d in (shape.tolist() if isinstance(shape, torch.Tensor) else np.ravel(shape).tolist()
                             if isinstance(shape, np.ndarray) else ([shape] if isinstance(shape, int) else shape))]


def constant(value: Any, dtype: Any = None, shape: Sequence[int] | None = None, name: str | None = None) -> Any:
    """``tf.constant``: Python ints are int32, floats float32, as in TF; ``shape`` broadcasts a scalar."""
    result = cast(value, dtype) if is_tensor(value) and dtype is not None else convert(value, dtype)
    if shape is not None:
        result = result.reshape(_dims(shape)) if result.numel() == np.prod(_dims(shape)) else result.expand(
            _dims(shape)).clone()
    return result


def convert_to_tensor(value: Any, dtype: Any = None, dtype_hint: Any = None, name: str | None = None) -> Any:
    """``tf.convert_to_tensor``: a torch tensor (bytes for strings); ``dtype_hint`` is used when it fits."""
    if dtype is None and dtype_hint is not None and not is_tensor(value):
        try:
            return convert(value, dtype_hint)
        except (TypeError, ValueError):
            pass
    return convert(value, dtype)


def cast(x: Any, dtype: Any, name: str | None = None) -> torch.Tensor:
    """``tf.cast``: floats to integers truncate toward zero; anything nonzero to ``bool`` is True."""
    target = dtypes.torch_dtype(dtype)
    source = tensor(x)
    if source.dtype.is_floating_point and not target.is_floating_point and target != torch.bool and target.is_signed:
        return source.trunc().to(target)
    if source.dtype.is_floating_point and target in (torch.uint8, torch.uint16, torch.uint32):
        # TF wraps modulo 2**bits (tf.cast(300., tf.uint8) == 44, -1. -> 255); go through int64 to get that.
        return source.trunc().to(torch.int64).to(target)
    return source.to(target)


def saturate_cast(value: Any, dtype: Any, name: str | None = None) -> torch.Tensor:
    """``tf.dtypes.saturate_cast``: clamp to ``dtype``'s range, then cast."""
    target = dtypes.as_dtype(dtype)
    source = tensor(value)
    if target.is_integer or target.is_floating:
        source = source.clamp(target.min, target.max)
    return cast(source, target)


def reshape(tensor_: Any, shape: Any, name: str | None = None) -> torch.Tensor:
    return tensor(tensor_).reshape(_dims(shape))


def expand_dims(input: Any, axis: int, name: str | None = None) -> torch.Tensor:  # noqa: A002 (TF's name)
    return tensor(input).unsqueeze(int(axis))


def squeeze(input: Any, axis: int | Sequence[int] | None = None, name: str | None = None) -> torch.Tensor:  # noqa: A002
    """``tf.squeeze``: drops size-1 axes; naming an axis whose size is not 1 raises, as in TF."""
    value = tensor(input)
    if axis is None:
        return value.squeeze()
    axes = [int(a) % value.ndim for a in ([axis] if isinstance(axis, int) else axis)]
    for a in axes:
        if value.shape[a] != 1:
            raise ValueError(f"Can not squeeze axis {a}: its size is {value.shape[a]}, not 1. "
                             f"Received: shape={tuple(value.shape)}, axis={axis}")
    return value.squeeze(tuple(axes))


def concat(values: Sequence[Any], axis: int, name: str | None = None) -> torch.Tensor:
    return torch.cat(operands("concat", *values), dim=int(axis))


def stack(values: Sequence[Any], axis: int = 0, name: str | None = None) -> torch.Tensor:
    return torch.stack(operands("stack", *values), dim=int(axis))


def unstack(value: Any, num: int | None = None, axis: int = 0, name: str | None = None) -> list[torch.Tensor]:
    return list(torch.unbind(tensor(value), dim=int(axis)))


def tile(input: Any, multiples: Any, name: str | None = None) -> torch.Tensor:  # noqa: A002
    value = tensor(input)
    reps = _dims(multiples)
    if len(reps) != value.ndim:
        raise ValueError(f"tile needs one multiple per axis. Received: multiples={reps}, shape={tuple(value.shape)}")
    return value.repeat(*reps)


def gather(params: Any, indices: Any, validate_indices: Any = None, axis: int | None = None, batch_dims: int = 0,
           name: str | None = None) -> torch.Tensor:
    """``tf.gather``: slices of ``params`` along ``axis`` at ``indices``; an index out of range raises."""
    if batch_dims:
        raise ValueError(f"gather with batch_dims is not provided; use torch.gather. Received: batch_dims={batch_dims}")
    values, index = tensor(params), tensor(indices)
    axis = 0 if axis is None else int(axis) % values.ndim
    picked = values.index_select(axis, index.reshape(-1).long())
    return picked.reshape(*values.shape[:axis], *index.shape, *values.shape[axis + 1:])


def one_hot(indices: Any, depth: int, on_value: Any = None, off_value: Any = None, axis: int | None = None,
            dtype: Any = None, name: str | None = None) -> torch.Tensor:
    """``tf.one_hot``: float32 unless ``dtype`` or ``on_value``/``off_value`` say otherwise; out of range -> zeros."""
    if dtype is None:
        given = on_value if on_value is not None else off_value
        dtype = tensor(given).dtype if given is not None else torch.float32
    target = dtypes.torch_dtype(dtype)
    on = 1 if on_value is None else tensor(on_value).item()
    off = 0 if off_value is None else tensor(off_value).item()
    return stratagem.one_hot(tensor(indices), int(depth), on, off, -1 if axis is None else int(axis), target)


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None, name: str = "range") -> torch.Tensor:  # noqa: A001
    """``tf.range``: int32 for integer arguments, float32 if any is a float."""
    if limit is None:
        start, limit = 0, start
    bounds = [convert(v) for v in (start, limit, delta)]
    if dtype is None:
        floating = [b for b in bounds if b.dtype.is_floating_point]
        dtype = floating[0].dtype if floating else bounds[0].dtype if is_tensor(start) else torch.int32
    target = dtypes.torch_dtype(dtype)
    return torch.arange(*(b.item() for b in bounds), dtype=target)


def zeros(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> torch.Tensor:
    return torch.zeros(_dims(shape), dtype=dtypes.torch_dtype(dtype))


def ones(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> torch.Tensor:
    return torch.ones(_dims(shape), dtype=dtypes.torch_dtype(dtype))


def zeros_like(input: Any, dtype: Any = None, name: str | None = None) -> torch.Tensor:  # noqa: A002
    value = tensor(input)
    return torch.zeros_like(value, dtype=None if dtype is None else dtypes.torch_dtype(dtype))


def ones_like(input: Any, dtype: Any = None, name: str | None = None) -> torch.Tensor:  # noqa: A002
    value = tensor(input)
    return torch.ones_like(value, dtype=None if dtype is None else dtypes.torch_dtype(dtype))


def fill(dims: Any, value: Any, name: str | None = None) -> torch.Tensor:
    """``tf.fill``: ``value``'s dtype (a Python int is int32)."""
    scalar = tensor(value)
    return torch.full(_dims(dims), scalar.item(), dtype=scalar.dtype)


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> torch.Tensor:
    """``tf.where``: with one argument, the int64 coordinates of the True entries; else ``x`` where true, ``y`` elsewhere."""
    mask = tensor(condition)
    if x is None and y is None:
        return torch.nonzero(mask.bool())
    if x is None or y is None:
        raise ValueError("tf.where needs both x and y, or neither. Received: one of them only")
    if mask.dtype != torch.bool:
        raise TypeError(f"tf.where's condition must be bool. Received: dtype={dtypes.as_dtype(mask.dtype).name}")
    left, right = operands("where", x, y)
    return torch.where(mask, left, right)


def shape(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> torch.Tensor:  # noqa: A002
    return torch.tensor(list(tensor(input).shape), dtype=dtypes.torch_dtype(out_type))


def size(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> torch.Tensor:  # noqa: A002
    return torch.tensor(tensor(input).numel(), dtype=dtypes.torch_dtype(out_type))


def rank(input: Any, name: str | None = None) -> torch.Tensor:  # noqa: A002
    return torch.tensor(tensor(input).ndim, dtype=torch.int32)


def identity(input: Any, name: str | None = None) -> torch.Tensor:  # noqa: A002
    """``tf.identity``: a new tensor with the same value (gradients flow through it)."""
    return tensor(input).clone()


def transpose(a: Any, perm: Sequence[int] | None = None, conjugate: bool = False, name: str = "transpose") -> torch.Tensor:
    value = tensor(a)
    return value.permute(*(reversed(builtins.range(value.ndim)) if perm is None else _dims(perm)))


def reverse(tensor_: Any, axis: Sequence[int], name: str | None = None) -> torch.Tensor:
    return torch.flip(tensor(tensor_), _dims(axis))


def boolean_mask(tensor_: Any, mask: Any, axis: int | None = None, name: str = "boolean_mask") -> torch.Tensor:
    value, keep = tensor(tensor_), tensor(mask)
    start = 0 if axis is None else int(axis)
    flat = value.flatten(start, start + keep.ndim - 1)
    return flat.index_select(start, torch.nonzero(keep.reshape(-1)).reshape(-1))


def split(value: Any, num_or_size_splits: Any, axis: int = 0, num: int | None = None,
          name: str = "split") -> list[torch.Tensor]:
    """``tf.split``: ``n`` equal pieces (the axis must divide, as in TF) or pieces of the given sizes."""
    data = tensor(value)
    if isinstance(num_or_size_splits, int):
        if data.shape[axis] % num_or_size_splits:
            raise ValueError(f"Cannot split an axis of size {data.shape[axis]} into {num_or_size_splits} equal "
                             f"pieces. Received: num_or_size_splits={num_or_size_splits}")
        return list(torch.chunk(data, num_or_size_splits, dim=axis))
    return list(torch.split(data, _dims(num_or_size_splits), dim=axis))


def slice(input_: Any, begin: Any, size: Any, name: str | None = None) -> torch.Tensor:  # noqa: A001
    """``tf.slice``: ``size[i]`` entries from ``begin[i]`` on each axis (-1: to the end)."""
    value = tensor(input_)
    for axis, (start, length) in enumerate(zip(_dims(begin), _dims(size))):
        value = value.narrow(axis, start, value.shape[axis] - start if length == -1 else length)
    return value


def pad(tensor_: Any, paddings: Any, mode: str = "CONSTANT", constant_values: Any = 0,
        name: str | None = None) -> torch.Tensor:
    """``tf.pad``: ``paddings[i] = [before, after]`` for axis ``i``; CONSTANT and REFLECT modes."""
    value = tensor(tensor_)
    pairs = np.asarray(paddings.tolist() if isinstance(paddings, torch.Tensor) else paddings).reshape(-1, 2)
    flat = [int(n) for before_after in pairs[::-1] for n in before_after]  # torch lists the last axis first
    if mode.upper() == "CONSTANT":
        return torch.nn.functional.pad(value, flat, value=tensor(constant_values).item())
    if mode.upper() == "REFLECT":
        return torch.nn.functional.pad(value, flat, mode="reflect")
    raise ValueError(f"pad mode {mode!r} is not provided; use 'CONSTANT' or 'REFLECT'. Received: mode={mode!r}")


def sort(values: Any, axis: int = -1, direction: str = "ASCENDING", name: str | None = None) -> torch.Tensor:
    return torch.sort(tensor(values), dim=axis, descending=_descending(direction), stable=True).values


def argsort(values: Any, axis: int = -1, direction: str = "ASCENDING", stable: bool = False,
            name: str | None = None) -> torch.Tensor:
    """``tf.argsort``: int32 indices, as in TF."""
    order = torch.sort(tensor(values), dim=axis, descending=_descending(direction), stable=True).indices
    return order.to(torch.int32)


def _descending(direction: str) -> bool:
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"direction must be 'ASCENDING' or 'DESCENDING'. Received: direction={direction!r}")
    return direction == "DESCENDING"


def linspace(start: Any, stop: Any, num: int, name: str | None = None, axis: int = 0) -> torch.Tensor:
    first, last = operands("linspace", start, stop)
    return torch.linspace(first.item(), last.item(), int(num), dtype=first.dtype)


class UniqueOutput(NamedTuple):
    y: torch.Tensor
    idx: torch.Tensor


def unique(x: Any, out_idx: Any = dtypes.int32, name: str | None = None) -> UniqueOutput:
    """``tf.unique``: the distinct values in order of first appearance, and each element's index into them."""
    value = tensor(x)
    values, inverse = torch.unique(value, sorted=True, return_inverse=True)
    first = torch.full((len(values),), len(value), dtype=torch.int64).scatter_reduce(
        0, inverse, torch.arange(len(value)), reduce="amin")
    order = torch.argsort(first)
    rank_of = torch.empty_like(order).scatter_(0, order, torch.arange(len(order)))
    return UniqueOutput(values[order], rank_of[inverse].to(dtypes.torch_dtype(out_idx)))


def print(*inputs: Any, output_stream: Any = sys.stderr, sep: str = " ", end: str = "\n", **_: Any) -> None:  # noqa: A001
    """``tf.print``: values as numpy prints them, to stderr by default (as TF)."""
    shown = [np.asarray(v.detach().cpu()) if isinstance(v, torch.Tensor) else v for v in inputs]
    builtins.print(*shown, sep=sep, end=end, file=output_stream)


def add_n(inputs: Sequence[Any], name: str | None = None) -> torch.Tensor:
    """``tf.math.add_n``: the element-wise sum, in the inputs' dtype (all must agree)."""
    return functools.reduce(torch.add, operands("add_n", *inputs))
