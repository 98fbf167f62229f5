"""BackupAndRestore in one process: an interrupted fit, restarted, ends with the uninterrupted model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.callbacks import BackupAndRestore, Callback
from stratagem.data import Dataset


class Crash(Exception):
    pass


class CrashAt(Callback):
    """Stands in for a killed worker: raises after ``step`` batches in total."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step, self.count = step, 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.count += 1
        if self.count == self.step:
            raise Crash


def _model(seed: int) -> stratagem.Model:
    torch.manual_seed(seed)  # a restarted process would start from other weights and RNG: restore must fix both
    model = stratagem.Model(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3)))
    model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(90, 6)).astype(np.float32)
    return x, x[:, :3].argmax(1)


def _scale(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x * 1.5, y


def _fit(model: stratagem.Model, kind: str, callbacks: list) -> stratagem.callbacks.History:
    x, y = _data()
    if kind == "arrays":
        return model.fit(x, y, batch_size=8, epochs=3, callbacks=callbacks, verbose=0)
    ds = Dataset.from_tensor_slices((x, y)).map(_scale, num_parallel_calls=2).shuffle(32).batch(8)
    return model.fit(ds, epochs=3, callbacks=callbacks, verbose=0)


@pytest.mark.parametrize("kind", ["arrays", "dataset"])
@pytest.mark.parametrize("save_freq", [3, "epoch"])
def test_restart_after_crash_ends_with_uninterrupted_weights(tmp_path: Path, kind: str, save_freq: object) -> None:
    torch.manual_seed(100)
    reference = _model(seed=0)
    reference_history = _fit(reference, kind, [BackupAndRestore(tmp_path / "ref", save_freq=save_freq)])

    torch.manual_seed(100)
    crashed = _model(seed=0)
    with pytest.raises(Crash):
        _fit(crashed, kind, [CrashAt(step=17), BackupAndRestore(tmp_path / "job", save_freq=save_freq)])
    assert list((tmp_path / "job").glob("backup-*.pt")), "a backup should exist after the crash"

    restarted = _model(seed=12345)
    backup = BackupAndRestore(tmp_path / "job", save_freq=save_freq)
    history = _fit(restarted, kind, [backup])
    assert backup.restored_from is not None
    for (name, a), b in zip(restarted.module.state_dict().items(), reference.module.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    # The last epoch's logged metrics match too (their running sums were backed up).
    assert history.history["loss"][-1] == pytest.approx(reference_history.history["loss"][-1], rel=1e-6)
    assert not (tmp_path / "job").exists(), "a completed fit deletes its backups, as Keras 3 does"


def test_fresh_run_after_completed_job_starts_over(tmp_path: Path) -> None:
    _fit(_model(seed=0), "arrays", [BackupAndRestore(tmp_path)])
    backup = BackupAndRestore(tmp_path)
    history = _fit(_model(seed=0), "arrays", [backup])  # not a restart: Keras semantics
    assert backup.restored_from is None and history.epoch == [0, 1, 2]


def test_damaged_newest_backup_falls_back_to_previous(tmp_path: Path) -> None:
    model = _model(seed=0)
    with pytest.raises(Crash):
        _fit(model, "arrays", [CrashAt(step=10), BackupAndRestore(tmp_path, save_freq=3)])
    newest = max(tmp_path.glob("backup-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    newest.write_bytes(newest.read_bytes()[:100])  # truncated, as by a crash of the disk under it
    backup = BackupAndRestore(tmp_path, save_freq=3)
    with pytest.warns(UserWarning, match="damaged backup"):
        _fit(_model(seed=1), "arrays", [backup])
    assert backup.restored_from is not None and backup.restored_from != str(newest)


def test_invalid_save_freq_raises() -> None:
    with pytest.raises(ValueError, match="Received: save_freq=0"):
        BackupAndRestore("x", save_freq=0)


def test_callback_counters_come_back_with_the_backup(tmp_path: Path) -> None:
    from stratagem.callbacks import ReduceLROnPlateau

    plateau = ReduceLROnPlateau(monitor="loss", patience=100)
    seen: list[tuple[float, int]] = []

    class Snapshot(Callback):
        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            seen.append((plateau.best, plateau.wait))

    with pytest.raises(Crash):  # 12 batches per epoch: crash in the third epoch, after two epoch-end backups
        _fit(_model(seed=0), "arrays", [plateau, Snapshot(), CrashAt(step=30), BackupAndRestore(tmp_path)])
    restored = ReduceLROnPlateau(monitor="loss", patience=100)
    backup = BackupAndRestore(tmp_path)
    model = _model(seed=1)
    model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))

    x, y = _data()
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[restored, backup])  # resumes after epoch 2: no epoch left
    assert (restored.best, restored.wait) == seen[-1] and restored.best != float("inf")
