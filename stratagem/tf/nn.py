"""``tf.nn``: activations and the losses written against logits, on torch, with TF's formulas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from stratagem.distribute import context
from stratagem.nn import compute_average_loss
from stratagem.tf import math as tf_math
from stratagem.tf._array_ops import gather
from stratagem.tf._refusal import module_getattr
from stratagem.tf._tensor import operands, tensor

sigmoid = tf_math.sigmoid
tanh = tf_math.tanh
softplus = tf_math.softplus
l2_normalize = tf_math.l2_normalize


def relu(features: Any, name: str | None = None) -> torch.Tensor:
    return torch.relu(tensor(features))


def relu6(features: Any, name: str | None = None) -> torch.Tensor:
    return torch.clamp(tensor(features), 0, 6)


def elu(features: Any, name: str | None = None) -> torch.Tensor:
    return F.elu(tensor(features))


def selu(features: Any, name: str | None = None) -> torch.Tensor:
    return F.selu(tensor(features))


def gelu(features: Any, approximate: bool = False, name: str | None = None) -> torch.Tensor:
    return F.gelu(tensor(features), approximate="tanh" if approximate else "none")


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> torch.Tensor:
    """``tf.nn.leaky_relu``: TF's default slope is 0.2 (torch's is 0.01)."""
    return F.leaky_relu(tensor(features), negative_slope=alpha)


def silu(features: Any, beta: float = 1.0) -> torch.Tensor:
    value = tensor(features)
    return value * torch.sigmoid(beta * value)


swish = silu


def softmax(logits: Any, axis: int | None = None, name: str | None = None) -> torch.Tensor:
    return torch.softmax(tensor(logits), dim=-1 if axis is None else axis)


def log_softmax(logits: Any, axis: int | None = None, name: str | None = None) -> torch.Tensor:
    return torch.log_softmax(tensor(logits), dim=-1 if axis is None else axis)


def l2_loss(t: Any, name: str | None = None) -> torch.Tensor:
    """``tf.nn.l2_loss``: ``sum(t ** 2) / 2``."""
    return tensor(t).square().sum() / 2


def sparse_softmax_cross_entropy_with_logits(labels: Any = None, logits: Any = None,
                                             name: str | None = None) -> torch.Tensor:
    """Per-example ``-log softmax(logits)[label]``; labels are class indices (a label out of range raises)."""
    scores, classes = tensor(logits), tensor(labels)
    if classes.dtype.is_floating_point:
        raise TypeError("labels must be integer class indices. Received: labels of a floating dtype")
    flat = F.cross_entropy(scores.reshape(-1, scores.shape[-1]), classes.reshape(-1).long(), reduction="none")
    return flat.reshape(classes.shape)


def softmax_cross_entropy_with_logits(labels: Any = None, logits: Any = None, axis: int = -1,
                                      name: str | None = None) -> torch.Tensor:
    """Per-example ``-sum(labels * log_softmax(logits))`` along ``axis`` (labels: a distribution per example)."""
    target, scores = operands("nn.softmax_cross_entropy_with_logits", labels, logits)
    return -(target * torch.log_softmax(scores, dim=axis)).sum(dim=axis)


def sigmoid_cross_entropy_with_logits(labels: Any = None, logits: Any = None, name: str | None = None) -> torch.Tensor:
    """Element-wise ``max(x, 0) - x * z + log(1 + exp(-|x|))`` for logits ``x`` and labels ``z``."""
    target, scores = operands("nn.sigmoid_cross_entropy_with_logits", labels, logits)
    return F.binary_cross_entropy_with_logits(scores, target, reduction="none")


def dropout(x: Any, rate: float, noise_shape: Sequence[int] | None = None, seed: int | None = None,
            name: str | None = None) -> torch.Tensor:
    """``tf.nn.dropout``: zero each entry with probability ``rate``, scale the rest by ``1 / (1 - rate)``."""
    if noise_shape is not None:
        raise ValueError(f"dropout's noise_shape is not provided. Received: noise_shape={noise_shape}")
    return F.dropout(tensor(x), p=float(rate), training=True)


def moments(x: Any, axes: Sequence[int], shift: Any = None, keepdims: bool = False,
            name: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``tf.nn.moments``: mean and (population) variance over ``axes``."""
    value = tensor(x)
    dims = tuple(axes)
    return value.mean(dim=dims, keepdim=keepdims), value.var(dim=dims, keepdim=keepdims, correction=0)


def bias_add(value: Any, bias: Any, data_format: str | None = None, name: str | None = None) -> torch.Tensor:
    inputs, offset = operands("nn.bias_add", value, bias)
    if data_format == "NCHW":
        return inputs + offset.reshape(1, -1, *([1] * (inputs.ndim - 2)))
    return inputs + offset


def embedding_lookup(params: Any, ids: Any, max_norm: float | None = None, name: str | None = None) -> torch.Tensor:
    return gather(params, ids)


def scale_regularization_loss(regularization_loss: Any) -> torch.Tensor:
    """``tf.nn.scale_regularization_loss``: the summed loss divided by ``num_replicas_in_sync``.

    The strategy sums gradients over replicas, so the term counts once per step, as on one device.
    """
    total = tensor(regularization_loss).sum()
    return total / context.get_strategy().num_replicas_in_sync


__getattr__ = module_getattr("tf.nn")
__all__ = [
    "bias_add", "compute_average_loss", "dropout", "elu", "embedding_lookup", "gelu", "l2_loss", "l2_normalize",
    "leaky_relu", "log_softmax", "moments", "relu", "relu6", "scale_regularization_loss", "selu", "sigmoid",
    "sigmoid_cross_entropy_with_logits", "silu", "softmax", "softmax_cross_entropy_with_logits", "softplus",
    "sparse_softmax_cross_entropy_with_logits", "swish", "tanh",
]
