"""ModelCheckpoint against Keras' behaviour: best-only saves, filepath formatting, batch frequency."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

from stratagem.callbacks import CallbackList, ModelCheckpoint
from stratagem.checkpoint.io import load_state
from tests.unit.callbacks._fakes import BATCH_SIZE, EpochRecorder, ScriptedLogs, compiled_model, data, weights

VAL_LOSS = [1.0, 0.5, 0.7, 0.4, 0.6]  # improves at epochs 0, 1, 3


def _fit(callbacks: list, epochs: int = len(VAL_LOSS)) -> dict[str, list[float]]:
    x, y = data()
    return compiled_model().fit(x, y, batch_size=BATCH_SIZE, epochs=epochs, shuffle=False, verbose=0,
                                callbacks=callbacks).history


def test_save_best_only_writes_only_epochs_that_improve(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(str(tmp_path / "w.{epoch:02d}.safetensors"), save_best_only=True)
    _fit([ScriptedLogs("val_loss", VAL_LOSS), checkpoint])
    assert sorted(os.listdir(tmp_path)) == ["w.01.safetensors", "w.02.safetensors", "w.04.safetensors"]
    assert checkpoint.best == 0.4


def test_save_best_only_rewrites_fixed_path_only_on_improvement(tmp_path: Path) -> None:
    path = tmp_path / "best.safetensors"

    def stamp(epoch: int, logs: dict, model: object) -> tuple[bool, dict]:
        # mtime 0 marks "seen"; a rewrite gives the file a fresh mtime (and, via rename, a new inode).
        rewritten = path.stat().st_mtime_ns != 0
        os.utime(path, ns=(0, 0))
        return rewritten, load_state(path)

    recorder = EpochRecorder(stamp)
    end_weights = EpochRecorder(lambda epoch, logs, model: weights(model))
    _fit([ScriptedLogs("val_loss", VAL_LOSS), ModelCheckpoint(str(path), save_best_only=True), recorder, end_weights])
    assert [rewritten for rewritten, _ in recorder.seen] == [True, True, False, True, False]
    for name, tensor in recorder.seen[-1][1].items():  # the file holds the weights of epoch 3, the best
        torch.testing.assert_close(tensor, end_weights.seen[3][name], rtol=0, atol=0)


def test_max_mode_auto_for_accuracy_and_initial_threshold(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(str(tmp_path / "{epoch}.pt"), monitor="val_accuracy", save_best_only=True,
                                 initial_value_threshold=0.6)
    _fit([ScriptedLogs("val_accuracy", [0.5, 0.7, 0.65, 0.8, 0.1]), checkpoint])
    assert sorted(os.listdir(tmp_path)) == ["2.pt", "4.pt"]


def test_filepath_formats_one_based_epoch_and_logs_keys(tmp_path: Path) -> None:
    history = _fit([ModelCheckpoint(str(tmp_path / "w.{epoch:02d}-{loss:.3f}.pt"))], epochs=3)
    expected = [f"w.{epoch + 1:02d}-{loss:.3f}.pt" for epoch, loss in enumerate(history["loss"])]
    assert sorted(os.listdir(tmp_path)) == expected


def test_filepath_with_unknown_key_raises_key_error(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="Failed to format this callback filepath"):
        _fit([ModelCheckpoint(str(tmp_path / "{val_loss:.2f}.pt"))], epochs=1)


def test_integer_save_freq_saves_every_n_batches_across_epochs(tmp_path: Path) -> None:
    # 4 batches per epoch, 12 in all: saves after global batches 3, 6, 9 and 12.
    _fit([ModelCheckpoint(str(tmp_path / "e{epoch}-b{batch}.pt"), save_freq=3)], epochs=3)
    assert sorted(os.listdir(tmp_path)) == ["e1-b3.pt", "e2-b2.pt", "e3-b1.pt", "e3-b4.pt"]


def test_missing_monitor_warns_once_and_saves_nothing(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit([ModelCheckpoint(str(tmp_path / "w.pt"), monitor="val_auc", save_best_only=True)], epochs=3)
    messages = [str(w.message) for w in caught if "Can save best model only" in str(w.message)]
    assert len(messages) == 1 and "val_auc" in messages[0]
    assert os.listdir(tmp_path) == []


def test_full_model_mode_writes_weights_that_load_back(tmp_path: Path) -> None:
    path = str(tmp_path / "model.safetensors")
    x, y = data()
    model = compiled_model()
    model.fit(x, y, batch_size=BATCH_SIZE, epochs=1, verbose=0, callbacks=[ModelCheckpoint(path)])
    trained = weights(model)
    fresh = compiled_model()
    fresh.load_weights(path)
    for name, tensor in weights(fresh).items():
        torch.testing.assert_close(tensor, trained[name], rtol=0, atol=0)


def test_verbose_prints_keras_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = ModelCheckpoint(str(tmp_path / "w.pt"), save_best_only=True, verbose=1)
    _fit([ScriptedLogs("val_loss", VAL_LOSS), checkpoint], epochs=3)
    out = capsys.readouterr().out
    assert "Epoch 2: val_loss improved from 1.00000 to 0.50000, saving model to" in out
    assert "Epoch 3: val_loss did not improve from 0.50000" in out


@pytest.mark.parametrize("kwargs", [{"save_freq": 0}, {"save_freq": "batch"}, {"mode": "maximum"}])
def test_invalid_arguments_raise_value_error(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="Received:"):
        ModelCheckpoint("w.pt", **kwargs)


def test_epoch_save_freq_needs_no_batch_logs() -> None:
    # Batch logs cost an all-reduce every step; saving per epoch must not ask for them.
    assert not CallbackList([ModelCheckpoint("w.pt")], model=None, params={}).wants("on_train_batch_end")
    assert CallbackList([ModelCheckpoint("w.pt", save_freq=2)], model=None, params={}).wants("on_train_batch_end")
