"""TerminateOnNaN stops fit at the first batch whose loss is NaN or infinite."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stratagem.callbacks import TerminateOnNaN
from tests.unit.callbacks._fakes import BATCH_SIZE, compiled_model, data


class _BadAfter(nn.Module):
    """A linear layer whose outputs become ``bad`` (NaN or inf) from its ``calls``-th forward on."""

    def __init__(self, calls: int, bad: float) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.calls, self.bad, self.forwards = calls, bad, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        out = self.linear(x)
        return out * self.bad if self.forwards >= self.calls else out


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_loss_stops_training_at_that_batch(bad: float, capsys: pytest.CaptureFixture[str]) -> None:
    module = _BadAfter(calls=6, bad=bad)  # 4 batches per epoch: the 6th forward is epoch 1, batch 1
    x, y = data()
    history = compiled_model(module).fit(x, y, batch_size=BATCH_SIZE, epochs=5, shuffle=False, verbose=0,
                                         callbacks=[TerminateOnNaN()])
    assert module.forwards == 6
    assert len(history.history["loss"]) == 2
    assert not math.isfinite(history.history["loss"][1])
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out


def test_finite_loss_trains_every_epoch() -> None:
    x, y = data()
    history = compiled_model().fit(x, y, batch_size=BATCH_SIZE, epochs=3, verbose=0, callbacks=[TerminateOnNaN()])
    assert len(history.history["loss"]) == 3
