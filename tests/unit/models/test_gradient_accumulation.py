"""Gradient accumulation: k micro-steps of a batch equal one step on k times that batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.errors import ConfigurationError
from stratagem.models.gradient_step import GradientStep
from stratagem.mixed_precision import DTypePolicy


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    return x, (x[:, :3].argmax(axis=1)).astype(np.int64)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _train(optimizer: stratagem.optimizers.Optimizer, batch_size: int) -> tuple[list[np.ndarray], int]:
    model = stratagem.Model(_net())
    model.compile(optimizer=optimizer, loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _data()
    model.fit(x, y, batch_size=batch_size, epochs=2, verbose=0, shuffle=False)
    return model.get_weights(), model.optimizer.torch_optimizer.param_groups[0]["iterations"]


@pytest.mark.parametrize("make", [lambda **k: stratagem.optimizers.SGD(0.5, momentum=0.9, **k),
                                  lambda **k: stratagem.optimizers.Adam(0.01, **k)], ids=["sgd_momentum", "adam"])
def test_four_accumulated_steps_match_one_step_on_four_times_the_batch(make):
    accumulated, updates = _train(make(gradient_accumulation_steps=4), batch_size=8)
    reference, reference_updates = _train(make(), batch_size=32)
    assert updates == reference_updates == 4  # 2 epochs of 64 examples: 16 micro-steps, 4 updates
    for got, expected in zip(accumulated, reference):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    initial = [t.numpy() for t in _net().state_dict().values()]
    assert max(float(np.abs(a - b).max()) for a, b in zip(accumulated, initial)) > 1e-2  # it trained


def test_accumulation_on_a_strategy_that_schedules_steps_raises_configuration_error():
    class Scheduled:  # what ParameterServerStrategy declares (SchedulesSteps)
        num_replicas_in_sync = 1
        device = torch.device("cpu")

        def pull_all(self) -> None: ...

    optimizer = stratagem.optimizers.SGD(gradient_accumulation_steps=2)
    with pytest.raises(ConfigurationError, match="Received: gradient_accumulation_steps=2"):
        GradientStep(Scheduled(), optimizer, None, nn.Linear(1, 1), DTypePolicy())
