"""TensorBoard: real event files, read back with TensorBoard's own reader, in Keras' layout and tags."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from stratagem.callbacks import CallbackList, LearningRateScheduler, TensorBoard
from tests.unit.callbacks._fakes import BATCH_SIZE, NUM_SAMPLES, compiled_model, data

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

EPOCHS = 3


def _read(folder: Path) -> event_accumulator.EventAccumulator:
    events = [name for name in os.listdir(folder) if name.startswith("events.out.tfevents")]
    assert len(events) == 1, events
    accumulator = event_accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    accumulator.Reload()
    return accumulator


def _fit(tensorboard: TensorBoard, *extra: object) -> dict[str, list[float]]:
    x, y = data()
    model = compiled_model()
    return model.fit(x, y, batch_size=BATCH_SIZE, epochs=EPOCHS, shuffle=False, verbose=0,
                     validation_data=data(16, seed=1), callbacks=[*extra, tensorboard]).history


def _steps(accumulator: event_accumulator.EventAccumulator, tag: str) -> list[int]:
    return [event.step for event in accumulator.Scalars(tag)]


def _values(accumulator: event_accumulator.EventAccumulator, tag: str) -> list[float]:
    return [event.value for event in accumulator.Scalars(tag)]


def test_epoch_scalars_in_train_and_validation_folders(tmp_path: Path) -> None:
    history = _fit(TensorBoard(log_dir=str(tmp_path)), LearningRateScheduler(lambda epoch: 0.1 / (epoch + 1)))
    train, validation = _read(tmp_path / "train"), _read(tmp_path / "validation")
    assert set(train.Tags()["scalars"]) == {"epoch_loss", "epoch_accuracy", "epoch_learning_rate",
                                             "epoch_samples_per_sec"}
    assert set(validation.Tags()["scalars"]) == {"epoch_loss", "epoch_accuracy"}
    for accumulator in (train, validation):
        for tag in accumulator.Tags()["scalars"]:
            assert _steps(accumulator, tag) == [0, 1, 2], tag
    assert _values(train, "epoch_loss") == pytest.approx(history["loss"], rel=1e-6)
    assert _values(validation, "epoch_loss") == pytest.approx(history["val_loss"], rel=1e-6)
    assert _values(validation, "epoch_accuracy") == pytest.approx(history["val_accuracy"], rel=1e-6)
    assert _values(train, "epoch_learning_rate") == pytest.approx([0.1, 0.05, 0.1 / 3], rel=1e-6)
    assert all(value > 0 for value in _values(train, "epoch_samples_per_sec"))
    assert train.Tags()["histograms"] == []


def test_integer_update_freq_writes_batch_scalars_on_a_global_step(tmp_path: Path) -> None:
    _fit(TensorBoard(log_dir=str(tmp_path), update_freq=5))
    train = _read(tmp_path / "train")
    steps_total = EPOCHS * NUM_SAMPLES // BATCH_SIZE  # 12 batches: written after batches 5 and 10
    assert _steps(train, "batch_loss") == [step for step in range(1, steps_total + 1) if step % 5 == 0]
    assert _steps(train, "batch_accuracy") == [5, 10]


def test_epoch_update_freq_writes_no_batch_scalars(tmp_path: Path) -> None:
    _fit(TensorBoard(log_dir=str(tmp_path)))
    assert not [tag for tag in _read(tmp_path / "train").Tags()["scalars"] if tag.startswith("batch_")]


def test_histogram_freq_writes_weight_histograms_every_n_epochs(tmp_path: Path) -> None:
    _fit(TensorBoard(log_dir=str(tmp_path), histogram_freq=2))
    train = _read(tmp_path / "train")
    assert set(train.Tags()["histograms"]) == {"weight/histogram", "bias/histogram"}
    assert [event.step for event in train.Histograms("weight/histogram")] == [0, 2]


def test_samples_per_sec_counts_the_epochs_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tensorboard = TensorBoard(log_dir=str(tmp_path))
    tensorboard.set_params({"batch_size": 8, "steps": 5, "samples": 37})  # 4 full batches and one of 5
    monkeypatch.setattr("stratagem.callbacks.tensorboard.time.perf_counter", lambda: 2.0)
    tensorboard._epoch_start = 1.5
    assert tensorboard._samples_per_sec() == pytest.approx(74.0)
    tensorboard.set_params({"batch_size": 8, "steps": 2, "samples": 37})  # steps_per_epoch=2: 16 examples
    assert tensorboard._samples_per_sec() == pytest.approx(32.0)


def test_missing_tensorboard_raises_import_error_naming_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match="pip install tensorboard"):
        TensorBoard()


@pytest.mark.parametrize("kwargs", [{"update_freq": 0}, {"update_freq": "step"}, {"histogram_freq": -1}])
def test_invalid_frequencies_raise_value_error(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="Received:"):
        TensorBoard(**kwargs)


def test_epoch_update_freq_needs_no_batch_logs(tmp_path: Path) -> None:
    # Batch logs cost an all-reduce every step; per-epoch logging must not ask for them.
    per_epoch, per_batch = TensorBoard(str(tmp_path)), TensorBoard(str(tmp_path), update_freq=3)
    assert not CallbackList([per_epoch], model=None, params={}).wants("on_train_batch_end")
    assert CallbackList([per_batch], model=None, params={}).wants("on_train_batch_end")


def test_write_graph_warns_that_no_graph_is_written(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"write_graph=True\) is not supported") as record:
        _fit(TensorBoard(log_dir=str(tmp_path), write_graph=True))
    assert len(record) >= 1
