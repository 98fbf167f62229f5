"""BackupAndRestore under faults: rate-reading schedules, several fits on one folder, backups that do not fit."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch

from stratagem.callbacks import BackupAndRestore, LearningRateScheduler
from stratagem.callbacks import backup_and_restore
from stratagem.checkpoint import load_state, save_state
from stratagem.errors import CheckpointError
from tests.unit.callbacks.test_backup_and_restore import Crash, CrashAt, _fit, _model


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # A restarted job is a new process: what this process counted of its fits is gone.
    monkeypatch.setattr(backup_and_restore, "_fits_completed", collections.Counter(), raising=False)


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), f"{name} differs by {float((x - y).abs().max())}"


def _decay(epoch: int, lr: float) -> float:
    return lr * 0.7  # reads the current rate: applied twice in one epoch, it stays off for good


def test_mid_epoch_resume_applies_a_rate_reading_schedule_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(100)
    reference = _model(seed=0)
    _fit(reference, "arrays", [LearningRateScheduler(_decay), BackupAndRestore(tmp_path / "ref", save_freq=5)])

    torch.manual_seed(100)
    with pytest.raises(Crash):  # 12 batches an epoch: killed in epoch 1, after a backup at batch 15
        _fit(_model(seed=0), "arrays", [LearningRateScheduler(_decay), CrashAt(step=17),
                                        BackupAndRestore(tmp_path / "job", save_freq=5)])
    _new_process(monkeypatch)
    restarted = _model(seed=12345)
    backup = BackupAndRestore(tmp_path / "job", save_freq=5)
    _fit(restarted, "arrays", [LearningRateScheduler(_decay), backup])
    assert backup.restored_from is not None
    assert float(restarted.optimizer.learning_rate) == float(reference.optimizer.learning_rate)
    _assert_same_weights(restarted.module, reference.module)


def test_second_fit_after_a_restart_trains_its_epochs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATAGEM_RESTART_COUNT", "1")  # as the launcher sets it after a restart
    with pytest.raises(Crash):
        _fit(_model(seed=0), "arrays", [CrashAt(step=17), BackupAndRestore(tmp_path)])
    _new_process(monkeypatch)
    model = _model(seed=1)
    assert _fit(model, "arrays", [BackupAndRestore(tmp_path)]).epoch == [1, 2]  # resumed after epoch 0
    assert _fit(model, "arrays", [BackupAndRestore(tmp_path)]).epoch == [0, 1, 2]
    assert not tmp_path.exists() or not list(tmp_path.iterdir()), "a completed fit deletes its backups"


def test_restarted_script_skips_a_completed_fit_and_resumes_the_next(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(100)
    reference = _model(seed=0)
    for _ in range(2):
        _fit(reference, "arrays", [BackupAndRestore(tmp_path / "ref", save_freq=5)])

    _new_process(monkeypatch)
    torch.manual_seed(100)
    model = _model(seed=0)
    _fit(model, "arrays", [BackupAndRestore(tmp_path / "job", save_freq=5)])
    with pytest.raises(Crash):  # killed in the second fit
        _fit(model, "arrays", [CrashAt(step=20), BackupAndRestore(tmp_path / "job", save_freq=5)])

    _new_process(monkeypatch)  # the script starts again from its first line
    restarted = _model(seed=7)
    first = _fit(restarted, "arrays", [BackupAndRestore(tmp_path / "job", save_freq=5)])
    second = _fit(restarted, "arrays", [BackupAndRestore(tmp_path / "job", save_freq=5)])
    assert first.epoch == [] and second.epoch == [1, 2]
    _assert_same_weights(restarted.module, reference.module)


def _crashed_job(folder: Path) -> list[Path]:
    with pytest.raises(Crash):
        _fit(_model(seed=0), "arrays", [CrashAt(step=10), BackupAndRestore(folder, save_freq=3)])
    return sorted(folder.glob("backup-*.pt"), key=lambda p: int(p.stem.split("-")[1]), reverse=True)


def test_backup_of_another_model_falls_back_to_an_older_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    newest, older = _crashed_job(tmp_path)[:2]
    state = load_state(newest)
    state["weights"] = {f"other.{k}": v for k, v in state["weights"].items()}  # another model's names
    save_state(newest, state)
    _new_process(monkeypatch)
    backup = BackupAndRestore(tmp_path, save_freq=3)
    with pytest.warns(UserWarning, match="another model"):
        _fit(_model(seed=1), "arrays", [backup])
    assert backup.restored_from == str(older)


def test_no_fitting_backup_raises_naming_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in _crashed_job(tmp_path):
        state = load_state(path)
        del state["optimizer"]
        save_state(path, state)
    _new_process(monkeypatch)
    model = _model(seed=1)
    before = [v.clone() for v in model.module.state_dict().values()]
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match=r"lacks \['optimizer'\]"):
        _fit(model, "arrays", [BackupAndRestore(tmp_path, save_freq=3)])
    assert all(torch.equal(a, b) for a, b in zip(before, model.module.state_dict().values())), "left half-loaded"


def test_backup_dir_that_is_a_file_raises_value_error(tmp_path: Path) -> None:
    (tmp_path / "backup").write_text("not a folder")
    with pytest.raises(ValueError, match="is a file"):
        _fit(_model(seed=0), "arrays", [BackupAndRestore(tmp_path / "backup")])
