"""A tiny compiled model, its data, and fakes that script or record ``logs`` for the callback tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

import stratagem
from stratagem.callbacks import Callback

NUM_SAMPLES, BATCH_SIZE = 32, 8  # 4 batches per epoch


def data(num_samples: int = NUM_SAMPLES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_samples, 4)).astype(np.float32)
    return x, (x[:, 0] > x[:, 1]).astype(np.int64)


def compiled_model(module: nn.Module | None = None, learning_rate: float = 0.1) -> stratagem.Model:
    torch.manual_seed(0)
    model = stratagem.Model(module if module is not None else nn.Linear(4, 2))
    model.compile(optimizer=stratagem.optimizers.SGD(learning_rate=learning_rate),
                  loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


class ScriptedLogs(Callback):
    """Overwrites ``logs[key]`` with the next scripted value at each epoch end; put it first."""

    def __init__(self, key: str, values: Sequence[float]) -> None:
        super().__init__()
        self.key, self.values = key, list(values)

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        assert logs is not None
        logs[self.key] = self.values[epoch]


class EpochRecorder(Callback):
    """Calls ``record(epoch, logs, model)`` at each epoch end and keeps what it returns."""

    def __init__(self, record: Callable[[int, dict[str, float], Any], Any]) -> None:
        super().__init__()
        self.record = record
        self.seen: list[Any] = []

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.seen.append(self.record(epoch, dict(logs or {}), self.model))


def weights(model: stratagem.Model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.module.state_dict().items()}
