"""Small models and data shared by the multi-process tests (importable by spawned workers)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def small_cnn(seed: int = 0) -> nn.Module:
    """A conv net in the shape of the seed CNN, small enough for many steps in a test."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(4 * 6 * 6, 16), nn.ReLU(), nn.Linear(16, 5),
    )


def classification_data(num_samples: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_samples, 64)).astype(np.float32)
    y = (x[:, :5].argmax(axis=1)).astype(np.int64)  # learnable labels
    return x, y


def state_as_numpy(module: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}
