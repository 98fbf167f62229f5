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


GLOBAL_BATCH = 16
# 24 full steps and a short last batch of 5 examples (split 3 + 2 on two replicas).
NUM_SAMPLES = GLOBAL_BATCH * 24 + 5


def train_small_cnn(optimizer: str) -> dict:
    """Trains small_cnn for 2 epochs in the current strategy; returns what the equivalence tests compare."""
    import stratagem

    x, y = classification_data(NUM_SAMPLES)
    model = stratagem.Model(small_cnn())
    model.compile(optimizer=optimizer, loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    torch.manual_seed(123)  # the shuffle seed is drawn from torch's RNG on the chief
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, verbose=0)
    x_test, y_test = classification_data(37, seed=7)  # 37: uneven on every batch size used
    return {
        "state": state_as_numpy(model.module),
        "history": history.history,
        "evaluate": model.evaluate(x_test, y_test, batch_size=8, return_dict=True),
        "predict": model.predict(x_test, batch_size=8),
        "optimizer_state_bytes": sum(v.numel() * v.element_size() for s in model.optimizer.torch_optimizer.state.values()
                                     for v in s.values() if isinstance(v, torch.Tensor)),
    }
