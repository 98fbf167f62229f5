"""EarlyStopping against Keras 3: patience, baseline, start_from_epoch, restore_best_weights."""

from __future__ import annotations

import pytest
import torch

from stratagem.callbacks import EarlyStopping
from tests.unit.callbacks._fakes import BATCH_SIZE, EpochRecorder, ScriptedLogs, compiled_model, data, weights


def _fit(early: EarlyStopping, key: str, values: list[float], *extra: object) -> tuple[object, dict]:
    x, y = data()
    model = compiled_model()
    history = model.fit(x, y, batch_size=BATCH_SIZE, epochs=len(values), shuffle=False, verbose=0,
                        callbacks=[ScriptedLogs(key, values), early, *extra])
    return model, history.history


def test_patience_two_stops_two_epochs_after_the_best() -> None:
    early = EarlyStopping(patience=2)
    _, history = _fit(early, "val_loss", [1.0, 0.9, 0.95, 0.97, 0.5, 0.4])
    assert early.stopped_epoch == 3
    assert len(history["loss"]) == 4
    assert early.best == 0.9 and early.best_epoch == 1


def test_restore_best_weights_loads_the_best_epochs_weights() -> None:
    snapshots = EpochRecorder(lambda epoch, logs, model: weights(model))
    early = EarlyStopping(patience=2, restore_best_weights=True)
    model, _ = _fit(early, "val_loss", [1.0, 0.9, 0.95, 0.97, 0.5], snapshots)
    assert len(snapshots.seen) == 4
    final = weights(model)
    for name, tensor in snapshots.seen[1].items():
        torch.testing.assert_close(final[name], tensor, rtol=0, atol=0)
    assert not torch.equal(final["weight"], snapshots.seen[3]["weight"])  # training did move the weights


def test_restore_best_weights_also_applies_when_training_runs_to_the_end() -> None:
    snapshots = EpochRecorder(lambda epoch, logs, model: weights(model))
    early = EarlyStopping(patience=5, restore_best_weights=True)
    model, _ = _fit(early, "val_loss", [1.0, 0.5, 0.7], snapshots)
    assert early.stopped_epoch == 0
    torch.testing.assert_close(weights(model)["weight"], snapshots.seen[1]["weight"], rtol=0, atol=0)


def test_min_delta_requires_a_large_enough_improvement() -> None:
    early = EarlyStopping(patience=1, min_delta=0.1)
    _fit(early, "val_loss", [1.0, 0.95, 0.5, 0.5])
    assert early.stopped_epoch == 1


def test_baseline_not_beaten_keeps_the_wait_running() -> None:
    early = EarlyStopping(patience=2, baseline=0.5)
    _fit(early, "val_loss", [1.0, 1.0, 1.0, 1.0])
    assert early.stopped_epoch == 1  # the first epoch's "improvement" did not beat the baseline


def test_start_from_epoch_ignores_warm_up_epochs() -> None:
    early = EarlyStopping(patience=1, start_from_epoch=2)
    _fit(early, "val_loss", [0.1, 0.2, 1.0, 1.0, 1.0])
    assert early.stopped_epoch == 3


def test_auto_mode_maximises_accuracy() -> None:
    early = EarlyStopping(monitor="val_accuracy", patience=1)
    _fit(early, "val_accuracy", [0.5, 0.6, 0.55, 0.9])
    assert early.maximize is True and early.stopped_epoch == 2


def test_auto_mode_on_unknown_metric_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Received: monitor='val_score'"):
        _fit(EarlyStopping(monitor="val_score"), "val_score", [1.0])


def test_instance_can_be_reused_for_a_second_fit() -> None:
    early = EarlyStopping(patience=1)
    _fit(early, "val_loss", [1.0, 1.0, 1.0])
    _fit(early, "val_loss", [1.0, 0.5, 0.4])
    assert early.stopped_epoch == 0 and early.best == 0.4


def test_verbose_reports_the_stop(capsys: pytest.CaptureFixture[str]) -> None:
    _fit(EarlyStopping(patience=1, verbose=1, restore_best_weights=True), "val_loss", [1.0, 2.0, 3.0])
    out = capsys.readouterr().out
    assert "Epoch 2: early stopping" in out
    assert "Restoring model weights from the end of the best epoch: 1." in out
