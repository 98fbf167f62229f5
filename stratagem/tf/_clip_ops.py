"""TF's clipping ops: ``tf.clip_by_value``, ``tf.clip_by_norm``, ``tf.clip_by_global_norm``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from stratagem.tf._tensor import operands, tensor


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any, name: str | None = None) -> torch.Tensor:
    """``tf.clip_by_value``: bounds of the tensor's dtype (a float bound on an int tensor raises, as in TF)."""
    value, low, high = operands("clip_by_value", t, clip_value_min, clip_value_max)
    return torch.minimum(torch.maximum(value, low), high)


def clip_by_norm(t: Any, clip_norm: Any, axes: Sequence[int] | None = None, name: str | None = None) -> torch.Tensor:
    """``tf.clip_by_norm``: ``t * clip_norm / max(l2norm(t), clip_norm)``."""
    value = tensor(t)
    norm = torch.linalg.vector_norm(value, dim=None if axes is None else tuple(axes), keepdim=axes is not None)
    bound = torch.as_tensor(float(clip_norm), dtype=value.dtype)
    return value * bound / torch.maximum(norm, bound)


def clip_by_global_norm(t_list: Sequence[Any], clip_norm: Any, use_norm: Any = None,
                        name: str | None = None) -> tuple[list[Any], torch.Tensor]:
    """``tf.clip_by_global_norm``: every tensor times ``clip_norm / max(global_norm, clip_norm)``, and the global norm.

    ``global_norm = sqrt(sum of squares of every entry of every tensor)``; None entries stay None, as in TF.
    """
    tensors = [None if t is None else tensor(t) for t in t_list]
    present = [t for t in tensors if t is not None]
    if use_norm is None:
        use_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.float()) for t in present]))
    norm = tensor(use_norm)
    bound = torch.as_tensor(float(clip_norm), dtype=norm.dtype)
    scale = bound / torch.maximum(norm, bound)
    return [None if t is None else t * scale.to(t.dtype) for t in tensors], norm
