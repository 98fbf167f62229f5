"""LearningRateScheduler and ReduceLROnPlateau against Keras: when the rate changes, and what logs show."""

from __future__ import annotations

import pytest

from stratagem.callbacks import Callback, LearningRateScheduler, ReduceLROnPlateau
from tests.unit.callbacks._fakes import BATCH_SIZE, EpochRecorder, ScriptedLogs, compiled_model, data


class _TrainingRate(Callback):
    """Records the rate the torch optimizer actually uses for each epoch's first batch."""

    def __init__(self) -> None:
        super().__init__()
        self.rates: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if batch == 0:
            self.rates.append(self.model.optimizer.torch_optimizer.param_groups[0]["lr"])


def _fit(callbacks: list, epochs: int, learning_rate: float = 0.1) -> None:
    x, y = data()
    compiled_model(learning_rate=learning_rate).fit(x, y, batch_size=BATCH_SIZE, epochs=epochs, shuffle=False,
                                                     verbose=0, callbacks=callbacks)


def decay(epoch: int) -> float:
    """The seed's schedule."""
    if epoch < 3:
        return 1e-3
    elif epoch < 7:
        return 1e-4
    else:
        return 1e-5


def test_scheduler_with_seed_decay_sets_rate_each_epoch_and_logs_it() -> None:
    training_rate = _TrainingRate()
    logged = EpochRecorder(lambda epoch, logs, model: logs["learning_rate"])
    _fit([LearningRateScheduler(decay), training_rate, logged], epochs=10)
    expected = [1e-3] * 3 + [1e-4] * 4 + [1e-5] * 3
    assert training_rate.rates == expected
    assert logged.seen == expected


def test_scheduler_passes_current_rate_to_two_argument_schedule() -> None:
    training_rate = _TrainingRate()
    _fit([LearningRateScheduler(lambda epoch, lr: lr * 0.5), training_rate], epochs=3, learning_rate=0.4)
    assert training_rate.rates == [0.2, 0.1, 0.05]


def test_scheduler_does_not_hide_type_error_raised_inside_schedule() -> None:
    def broken(epoch: int, lr: float) -> float:
        raise TypeError("bug inside the schedule")

    with pytest.raises(TypeError, match="bug inside the schedule"):
        _fit([LearningRateScheduler(broken)], epochs=1)


def test_scheduler_rejects_non_number_output() -> None:
    with pytest.raises(ValueError, match="should be a float. Received: '0.1'"):
        _fit([LearningRateScheduler(lambda epoch: "0.1")], epochs=1)


def test_scheduler_verbose_prints_rate(capsys: pytest.CaptureFixture[str]) -> None:
    _fit([LearningRateScheduler(decay, verbose=1)], epochs=1)
    assert "Epoch 1: LearningRateScheduler setting learning rate to 0.001." in capsys.readouterr().out


def test_plateau_reduces_after_patience_with_cooldown_and_min_lr() -> None:
    # Never improves after epoch 0; patience 1, cooldown 2, factor 0.5, floor 0.02 (Keras' algorithm):
    # reductions at the ends of epochs 1, 3 and 5 (the last one clipped to min_lr), then none.
    training_rate = _TrainingRate()
    logged = EpochRecorder(lambda epoch, logs, model: logs["learning_rate"])
    plateau = ReduceLROnPlateau(factor=0.5, patience=1, cooldown=2, min_lr=0.02)
    _fit([ScriptedLogs("val_loss", [1.0] * 9), plateau, training_rate, logged], epochs=9)
    assert training_rate.rates == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.02, 0.02, 0.02], rel=1e-12)
    assert logged.seen == training_rate.rates  # logs carry the rate the epoch trained with


def test_plateau_improvement_resets_the_wait() -> None:
    training_rate = _TrainingRate()
    values = [1.0, 1.0, 0.5, 0.5, 0.5, 0.5]  # patience 2: the improvement at epoch 2 restarts the count
    _fit([ScriptedLogs("val_loss", values), ReduceLROnPlateau(factor=0.1, patience=2), training_rate], epochs=6)
    assert training_rate.rates == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.1, 0.01], rel=1e-12)


def test_plateau_min_delta_and_max_mode_for_accuracy() -> None:
    training_rate = _TrainingRate()
    plateau = ReduceLROnPlateau(monitor="val_accuracy", factor=0.5, patience=1, min_delta=0.05)
    _fit([ScriptedLogs("val_accuracy", [0.5, 0.52, 0.7, 0.71]), plateau, training_rate], epochs=4)
    assert training_rate.rates == pytest.approx([0.1, 0.1, 0.05, 0.05], rel=1e-12)


def test_plateau_missing_monitor_warns_and_keeps_rate() -> None:
    training_rate = _TrainingRate()
    with pytest.warns(UserWarning, match="conditioned on metric `val_loss` which is not available"):
        _fit([ReduceLROnPlateau(patience=0), training_rate], epochs=2)
    assert training_rate.rates == [0.1, 0.1]


@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_plateau_factor_of_one_or_more_raises_value_error(factor: float) -> None:
    with pytest.raises(ValueError, match=f"Received: factor={factor}"):
        ReduceLROnPlateau(factor=factor)
