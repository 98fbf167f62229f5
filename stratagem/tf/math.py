"""``tf.math``: element-wise arithmetic, comparisons and reductions on torch, with TF's dtype rules.

Where TF and torch differ, TF wins: two dtypes raise (no promotion); ``divide`` of int32/int64 gives float64 (smaller
ints float32); ``floordiv`` rounds toward -inf; reductions keep the dtype (``reduce_mean`` of ints truncates);
``argmax`` gives int64 over axis 0; ``sqrt``/``exp``/``log`` refuse integers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from stratagem.tf import dtypes
from stratagem.tf._array_ops import add_n
from stratagem.tf._refusal import module_getattr
from stratagem.tf._tensor import convert, operands, tensor


def _binary(op: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
            doc: str = "element-wise, on operands of one dtype (TF does not promote).") -> Callable[..., torch.Tensor]:
    def apply(x: Any, y: Any, name: str | None = None) -> torch.Tensor:
        left, right = operands(op, x, y)
        return fn(left, right)

    apply.__name__ = apply.__qualname__ = op
    apply.__doc__ = f"``tf.math.{op}``: {doc}"
    return apply


def _unary(op: str, fn: Callable[[torch.Tensor], torch.Tensor], *, floats_only: bool = False) -> Callable[..., Any]:
    def apply(x: Any, name: str | None = None) -> torch.Tensor:
        value = tensor(x)
        if floats_only and not (value.dtype.is_floating_point or value.dtype.is_complex):
            raise TypeError(f"tf.math.{op} takes floating-point tensors, as in TF. Cast first: "
                            f"tf.{op}(tf.cast(x, tf.float32)). Received: dtype={dtypes.as_dtype(value.dtype).name}")
        return fn(value)

    apply.__name__ = apply.__qualname__ = op
    apply.__doc__ = f"``tf.math.{op}``: element-wise" + (" (floating-point inputs only, as in TF)." if floats_only else ".")
    return apply


def _power(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if not x.dtype.is_floating_point and not x.dtype.is_complex and bool((y < 0).any()):
        raise ValueError("Integers to negative integer powers are not allowed, as in TF. Cast to a float first. "
                         f"Received: exponent {y.tolist()}")
    return torch.pow(x, y)


_equal = _binary("equal", torch.eq)
_not_equal = _binary("not_equal", torch.ne)


def equal(x: Any, y: Any, name: str | None = None) -> torch.Tensor:
    """``tf.math.equal``: element-wise ``x == y`` (strings compare as bytes, as TF compares string tensors)."""
    return _compare_text(x, y, np.equal) if _is_text(x) or _is_text(y) else _equal(x, y)


def not_equal(x: Any, y: Any, name: str | None = None) -> torch.Tensor:
    """``tf.math.not_equal``: element-wise ``x != y`` (strings compare as bytes)."""
    return _compare_text(x, y, np.not_equal) if _is_text(x) or _is_text(y) else _not_equal(x, y)


def _is_text(value: Any) -> bool:
    return isinstance(value, (bytes, str)) or (isinstance(value, np.ndarray) and value.dtype.kind in "SUO")


def _compare_text(x: Any, y: Any, compare: Any) -> torch.Tensor:
    left, right = (np.asarray(convert(v, dtypes.string), dtype=object) for v in (x, y))
    return torch.as_tensor(np.asarray(compare(left, right), dtype=bool))


# The element-wise ops, one table: TF name -> torch function. _binary and _unary add TF's dtype rules (operands of
# one dtype, floating-point inputs only where TF asks for them); the names are bound at import, below.
_BINARY_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "maximum": torch.maximum,
    "minimum": torch.minimum, "floordiv": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "floormod": torch.remainder, "pow": _power, "squared_difference": lambda x, y: (x - y).square(),
    "less": torch.lt, "less_equal": torch.le, "greater": torch.gt, "greater_equal": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
}
_UNARY_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "abs": torch.abs, "negative": torch.neg, "sign": torch.sign, "square": torch.square,
    "round": torch.round,  # half to even, as TF and torch both do
    "logical_not": torch.logical_not,
}
_FLOAT_UNARY_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "ceil": torch.ceil, "floor": torch.floor, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "exp": torch.exp,
    "log": torch.log, "log1p": torch.log1p, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "softplus": torch.nn.functional.softplus, "sin": torch.sin, "cos": torch.cos, "erf": torch.erf,
    "reciprocal": torch.reciprocal, "is_nan": torch.isnan, "is_inf": torch.isinf, "is_finite": torch.isfinite,
}
globals().update({name: _binary(name, fn) for name, fn in _BINARY_OPS.items()})
globals().update({name: _unary(name, fn) for name, fn in _UNARY_OPS.items()})
globals().update({name: _unary(name, fn, floats_only=True) for name, fn in _FLOAT_UNARY_OPS.items()})
mod = globals()["floormod"]


def _true_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.int32, torch.int64, torch.uint32, torch.uint64):
        return torch.float64  # TF's truediv: 32- and 64-bit integers divide in float64
    if not dtype.is_floating_point and not dtype.is_complex:
        return torch.float32  # 8- and 16-bit integers divide in float32
    return dtype


def divide(x: Any, y: Any, name: str | None = None) -> torch.Tensor:
    """``tf.math.divide`` (and ``truediv``, ``/`` in TF): integers divide as floats, int32 -> float64 as in TF."""
    left, right = operands("divide", x, y)
    target = _true_dtype(left.dtype)
    return torch.div(left.to(target), right.to(target))


truediv = divide
divide_no_nan = _binary("divide_no_nan", lambda x, y: torch.where(y == 0, torch.zeros((), dtype=x.dtype),
                                                                   x / torch.where(y == 0, 1, y)), "0 where ``y`` is 0.")
multiply_no_nan = _binary("multiply_no_nan", lambda x, y: torch.where(y == 0, torch.zeros((), dtype=x.dtype), x * y),
                          "0 where ``y`` is 0 (even where ``x`` is inf or nan).")
# tf.truncatediv / tf.truncatemod: TF's top-level names, kept here beside the other divisions.
truncatediv = _binary("truncatediv", lambda x, y: torch.div(x, y, rounding_mode="trunc"),
                      "integer division rounding toward zero (C's rule).")
truncatemod = _binary("truncatemod", torch.fmod, "the remainder with the dividend's sign.")


def _axes(value: torch.Tensor, axis: Any) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(value.ndim))
    if isinstance(axis, torch.Tensor):
        axis = axis.tolist()
    return tuple(int(a) for a in (axis if isinstance(axis, (list, tuple)) else [axis]))


def _reduction(op: str, fn: Callable[[torch.Tensor, tuple[int, ...], bool], torch.Tensor], *,
               takes: str = "numeric") -> Callable[..., torch.Tensor]:
    def reduce(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> torch.Tensor:
        value = tensor(input_tensor)
        kind = "bool" if value.dtype == torch.bool else "numeric"
        if takes not in (kind, "any"):
            raise TypeError(f"tf.math.{op} takes {takes} tensors, as in TF. Cast first with tf.cast. Received: "
                            f"dtype={dtypes.as_dtype(value.dtype).name}")
        axes = _axes(value, axis)
        if not axes:
            return value.clone()  # axis=[] reduces nothing, as in TF (torch would reduce everything)
        return fn(value, axes, keepdims).to(value.dtype)

    reduce.__name__ = reduce.__qualname__ = op
    reduce.__doc__ = f"``tf.math.{op}``: over ``axis`` (all axes if None), keeping the input's dtype."
    return reduce


def _mean(value: torch.Tensor, axes: tuple[int, ...], keepdims: bool) -> torch.Tensor:
    if value.dtype.is_floating_point or value.dtype.is_complex:
        return value.mean(dim=axes, keepdim=keepdims)
    count = 1
    for a in axes:
        count *= value.shape[a]
    return torch.div(value.sum(dim=axes, keepdim=keepdims), count, rounding_mode="trunc")  # TF: integer mean truncates


def _prod(value: torch.Tensor, axes: tuple[int, ...], keepdims: bool) -> torch.Tensor:
    for a in sorted((a % value.ndim for a in axes), reverse=True):
        value = value.prod(dim=a, keepdim=keepdims)
    return value


reduce_sum = _reduction("reduce_sum", lambda v, a, k: v.sum(dim=a, keepdim=k))
reduce_mean = _reduction("reduce_mean", _mean)
reduce_prod = _reduction("reduce_prod", _prod)
reduce_max = _reduction("reduce_max", lambda v, a, k: v.amax(dim=a, keepdim=k), takes="any")
reduce_min = _reduction("reduce_min", lambda v, a, k: v.amin(dim=a, keepdim=k), takes="any")
reduce_any = _reduction("reduce_any", lambda v, a, k: v.any(dim=a, keepdim=k), takes="bool")
reduce_all = _reduction("reduce_all", lambda v, a, k: v.all(dim=a, keepdim=k), takes="bool")
reduce_logsumexp = _reduction("reduce_logsumexp", lambda v, a, k: torch.logsumexp(v, dim=a, keepdim=k))
reduce_variance = _reduction("reduce_variance", lambda v, a, k: v.var(dim=a, keepdim=k, correction=0))
reduce_std = _reduction("reduce_std", lambda v, a, k: v.std(dim=a, keepdim=k, correction=0))
reduce_euclidean_norm = _reduction("reduce_euclidean_norm",
                                   lambda v, a, k: torch.linalg.vector_norm(v.double() if not v.is_floating_point()
                                                                            else v, dim=a, keepdim=k))


def _arg(op: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def apply(input: Any, axis: int | None = None, output_type: Any = dtypes.int64,  # noqa: A002
              name: str | None = None) -> torch.Tensor:
        value = tensor(input)
        return fn(value, dim=0 if axis is None else int(axis)).to(dtypes.torch_dtype(output_type))

    apply.__name__ = apply.__qualname__ = op
    apply.__doc__ = f"``tf.math.{op}``: int64 indices along ``axis`` (0 when None, as in TF: not flattened)."
    return apply


argmax = _arg("argmax", torch.argmax)
argmin = _arg("argmin", torch.argmin)


class TopKV2(NamedTuple):
    values: torch.Tensor
    indices: torch.Tensor


def top_k(input: Any, k: int = 1, sorted: bool = True, index_type: Any = dtypes.int32,  # noqa: A002
          name: str | None = None) -> TopKV2:
    """``tf.math.top_k``: the ``k`` largest entries of the last axis and their int32 indices."""
    values, indices = torch.topk(tensor(input), int(k), dim=-1, largest=True, sorted=True)
    return TopKV2(values, indices.to(dtypes.torch_dtype(index_type)))


def in_top_k(targets: Any, predictions: Any, k: int, name: str | None = None) -> torch.Tensor:
    """``tf.math.in_top_k``: whether each target's prediction is among the ``k`` largest (ties count, as in TF)."""
    scores, labels = tensor(predictions), tensor(targets).long()
    target_score = scores.gather(1, labels.unsqueeze(1))
    return (scores > target_score).sum(dim=1) < int(k)


def cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False, name: str | None = None) -> torch.Tensor:
    value = tensor(x)
    flipped = value.flip(axis) if reverse else value
    total = flipped.cumsum(dim=axis).to(value.dtype)
    if exclusive:
        total = total - flipped
    return total.flip(axis) if reverse else total


def count_nonzero(input: Any, axis: Any = None, keepdims: bool = False, dtype: Any = dtypes.int64,  # noqa: A002
                  name: str | None = None) -> torch.Tensor:
    value = tensor(input)
    return (value != 0).sum(dim=_axes(value, axis), keepdim=keepdims).to(dtypes.torch_dtype(dtype))


def l2_normalize(x: Any, axis: Any = None, epsilon: float = 1e-12, name: str | None = None) -> torch.Tensor:
    """``tf.math.l2_normalize``: ``x / sqrt(max(sum(x**2), epsilon))``."""
    value = tensor(x)
    squares = value.square().sum(dim=_axes(value, axis), keepdim=True)
    return value * torch.rsqrt(torch.clamp(squares, min=epsilon))


def confusion_matrix(labels: Any, predictions: Any, num_classes: int | None = None, weights: Any = None,
                     dtype: Any = dtypes.int32, name: str | None = None) -> torch.Tensor:
    """``tf.math.confusion_matrix``: rows are labels, columns predictions."""
    truth, guess = tensor(labels).long(), tensor(predictions).long()
    size = int(num_classes) if num_classes is not None else int(max(truth.max(), guess.max())) + 1
    counts = torch.ones_like(truth) if weights is None else tensor(weights)
    target = dtypes.torch_dtype(dtype)
    matrix = torch.zeros(size * size, dtype=target)
    return matrix.index_add_(0, truth * size + guess, counts.to(target)).reshape(size, size)


__getattr__ = module_getattr("tf.math")
__all__ = [
    "abs", "add", "add_n", "argmax", "argmin", "ceil", "confusion_matrix", "cos", "count_nonzero", "cumsum",
    "divide", "divide_no_nan", "equal", "erf", "exp", "floor", "floordiv", "floormod", "greater", "greater_equal",
    "in_top_k", "is_finite", "is_inf", "is_nan", "l2_normalize", "less", "less_equal", "log", "log1p",
    "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "mod", "multiply",
    "multiply_no_nan", "negative", "not_equal", "pow", "reciprocal", "reduce_all", "reduce_any",
    "reduce_euclidean_norm", "reduce_logsumexp", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod",
    "reduce_std", "reduce_sum", "reduce_variance", "round", "rsqrt", "sigmoid", "sign", "sin", "softplus", "sqrt",
    "square", "squared_difference", "subtract", "tanh", "top_k", "truediv", "truncatediv", "truncatemod",
]
