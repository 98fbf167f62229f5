"""A small compiled model and its data, for the checkpoint tests."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import stratagem


def small_model() -> stratagem.Model:
    torch.manual_seed(0)
    model = stratagem.Model(nn.Sequential(nn.Linear(4, 3)))
    model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def small_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 4)).astype(np.float32), rng.integers(0, 3, size=16)
