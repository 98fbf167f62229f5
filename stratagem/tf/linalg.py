"""``tf.linalg``: ``matmul`` (also ``tf.matmul``), ``norm``, ``matrix_transpose``, ``diag_part``, on torch."""

from __future__ import annotations

from typing import Any

import torch

from stratagem.tf._refusal import module_getattr
from stratagem.tf._tensor import operands, tensor


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, adjoint_a: bool = False,
           adjoint_b: bool = False, a_is_sparse: bool = False, b_is_sparse: bool = False, output_type: Any = None,
           name: str | None = None) -> torch.Tensor:
    """``tf.linalg.matmul``: the product of the inner two axes, on operands of one dtype."""
    left, right = operands("matmul", a, b)
    if transpose_a or adjoint_a:
        left = left.mT.conj() if adjoint_a else left.mT
    if transpose_b or adjoint_b:
        right = right.mT.conj() if adjoint_b else right.mT
    return torch.matmul(left, right)


def matrix_transpose(a: Any, name: str = "matrix_transpose", conjugate: bool = False) -> torch.Tensor:
    value = tensor(a).mT
    return value.conj() if conjugate else value


def norm(tensor_: Any, ord: Any = "euclidean", axis: Any = None, keepdims: bool | None = None,  # noqa: A002
         name: str | None = None) -> torch.Tensor:
    """``tf.norm``/``tf.linalg.norm``: the vector norm of all entries, or along ``axis``."""
    value = tensor(tensor_)
    order = 2 if ord in ("euclidean", 2) else ord
    dims = None if axis is None else (axis if isinstance(axis, int) else tuple(axis))
    return torch.linalg.vector_norm(value, ord=order, dim=dims, keepdim=bool(keepdims))


def diag_part(input: Any, name: str = "diag_part") -> torch.Tensor:  # noqa: A002
    return torch.diagonal(tensor(input), dim1=-2, dim2=-1)


__getattr__ = module_getattr("tf.linalg")
__all__ = ["diag_part", "matmul", "matrix_transpose", "norm"]
