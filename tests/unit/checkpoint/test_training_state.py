"""One training-state format with one reader: BackupAndRestore's backups, the Estimator's checkpoints and
hvd.elastic's state file are each ``checkpoint.state``'s file plus their own counters; the files earlier
versions wrote (one layout per writer) still restore; a file of another writer or a newer version is refused
naming the file and the fix."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

import stratagem
import stratagem.horovod as hvd
from stratagem.callbacks import BackupAndRestore
from stratagem.checkpoint import state as training_state
from stratagem.checkpoint.io import load_state, save_state
from stratagem.checkpoint.state import FORMAT_VERSION, StateKind
from stratagem.data import Dataset
from stratagem.errors import CheckpointError
from stratagem.estimator import model_to_estimator
from stratagem.horovod.elastic import STATE_FILE_ENV, ElasticSampler, TorchState
from tests.unit.checkpoint._small import small_data, small_model

ROOT = Path(__file__).resolve().parents[3]


def _input_fn():  # noqa: ANN202
    x, y = small_data()
    return lambda: Dataset.from_tensor_slices((x, y)).batch(4)


def _backup_file(folder: Path) -> Path:
    """A real backup: fit killed in its second epoch, after the backup of the first."""

    class StopInEpoch2(stratagem.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
            if epoch == 1:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        small_model().fit(*small_data(), epochs=2, verbose=0, callbacks=[BackupAndRestore(folder), StopInEpoch2()])
    return folder / "backup-1.pt"


def _elastic_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, nn.Module]:
    path = tmp_path / "state.pt"
    monkeypatch.setenv(STATE_FILE_ENV, str(path))
    torch.manual_seed(0)
    module = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    state = TorchState(module, optimizer, sampler=ElasticSampler(range(10), num_replicas=1, rank=0), epoch=2)
    module(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    state.sampler.record_batch(0, 4)
    state.commit()
    return path, module


def test_every_writer_writes_the_one_format_with_its_counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backup = _backup_file(tmp_path / "backup")
    model_to_estimator(small_model(), model_dir=str(tmp_path / "est")).train(_input_fn(), steps=3)
    hvd.init()
    try:
        elastic, module = _elastic_file(tmp_path, monkeypatch)
    finally:
        hvd.shutdown()
    files = {StateKind.BACKUP: backup, StateKind.ESTIMATOR: tmp_path / "est" / "model.ckpt-3.pt",
             StateKind.ELASTIC: elastic}
    for kind, path in files.items():
        raw = load_state(path)  # the file as written, not upgraded by the reader
        assert raw["format"] == FORMAT_VERSION and raw["kind"] == kind.value, path
        assert isinstance(raw["weights"], dict) and raw["weights"] and isinstance(raw["optimizer"], dict)
        assert raw["sharded"] is False
        assert training_state.read(path, kind=kind)["counters"] == raw["counters"]
    assert load_state(backup)["counters"] == {"fit_index": 0}
    assert load_state(files[StateKind.ESTIMATOR])["counters"] == {"global_step": 3}
    counters = load_state(elastic)["counters"]
    assert counters["values"] == {"epoch": 2} and len(counters["samplers"]["sampler"]["processed_indices"]) == 4
    assert all(torch.equal(load_state(elastic)["weights"][k], v) for k, v in module.state_dict().items())


def test_only_the_training_state_module_reads_and_writes_training_state_files() -> None:
    # The file layer (checkpoint.io) has three other users, each a separate format by purpose:
    # save_weights/load_weights (models/model.py), the exported model's weights (models/saving.py), and
    # tf.train.Checkpoint's objects (train.py). A fourth caller would be a second training-state format.
    callers = set()
    for path in (ROOT / "stratagem").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("load_state", "save_state"):
                    callers.add(path.relative_to(ROOT / "stratagem").as_posix())
    assert callers == {"checkpoint/state.py", "models/model.py", "models/saving.py", "train.py"}


def test_estimator_checkpoint_of_an_earlier_version_is_read_and_resumed(tmp_path: Path) -> None:
    first = model_to_estimator(small_model(), model_dir=str(tmp_path))
    first.train(_input_fn(), steps=3)
    current = load_state(tmp_path / "model.ckpt-3.pt")
    # The layout the Estimator wrote before the one format: global step, weights, optimizer at the top.
    save_state(tmp_path / "model.ckpt-3.pt", {"global_step": 3, "weights": current["weights"],
                                               "optimizer": current["optimizer"]})
    again = model_to_estimator(small_model(), model_dir=str(tmp_path))
    assert again.get_variable_names() == sorted(current["weights"])
    assert again.evaluate(_input_fn())["global_step"] == 3  # evaluate first: train then builds its own model
    again.train(_input_fn(), steps=2)
    assert load_state(tmp_path / "model.ckpt-5.pt")["counters"] == {"global_step": 5}
    # The same 5 steps without the rewrite: resuming from the old layout lost nothing (Adam state included).
    reference = model_to_estimator(small_model(), model_dir=str(tmp_path / "ref"))
    reference.train(_input_fn(), steps=3).train(_input_fn(), steps=2)
    for key, value in load_state(tmp_path / "ref" / "model.ckpt-5.pt")["weights"].items():
        torch.testing.assert_close(load_state(tmp_path / "model.ckpt-5.pt")["weights"][key], value, rtol=0, atol=0)


def test_elastic_state_of_an_earlier_version_is_what_a_restarted_run_starts_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hvd.init()
    try:
        path, module = _elastic_file(tmp_path, monkeypatch)
        current = load_state(path)
        save_state(path, {"model": current["weights"], "optimizer": current["optimizer"],  # the earlier layout
                          **current["counters"]})
        fresh = nn.Linear(3, 1)
        optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
        restarted = TorchState(fresh, optimizer, sampler=ElasticSampler(range(10), num_replicas=1, rank=0), epoch=0)

        @hvd.elastic.run
        def train(state: TorchState) -> tuple[int, int]:
            return state.epoch, len(state.sampler)

        assert train(restarted) == (2, 6)
        assert all(torch.equal(module.state_dict()[k], v) for k, v in fresh.state_dict().items())
        assert optimizer.state_dict()["state"][0]["momentum_buffer"] is not None
    finally:
        hvd.shutdown()


def test_backup_of_an_earlier_version_resumes_fit(tmp_path: Path) -> None:
    backup = _backup_file(tmp_path / "backup")
    current = load_state(backup)
    older = {k: v for k, v in current.items() if k not in ("kind", "counters")}
    save_state(backup, {**older, "format": 1, **current["counters"]})  # version 1: fit_index at the top
    callback = BackupAndRestore(tmp_path / "backup")
    resumed = small_model()
    resumed.fit(*small_data(), epochs=2, verbose=0, callbacks=[callback])
    assert callback.restored_from == str(backup)
    reference = small_model()
    reference.fit(*small_data(), epochs=2, verbose=0)
    for key, value in reference.module.state_dict().items():
        torch.testing.assert_close(resumed.module.state_dict()[key], value, rtol=0, atol=0)


def test_a_file_of_another_writer_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    backup = _backup_file(tmp_path / "backup")
    (tmp_path / "est").mkdir()
    (tmp_path / "est" / "model.ckpt-7.pt").write_bytes(backup.read_bytes())
    estimator = model_to_estimator(small_model(), model_dir=str(tmp_path / "est"))
    with pytest.raises(CheckpointError, match=r"model\.ckpt-7\.pt' is the training state of BackupAndRestore, not "
                                              r"of an Estimator.*own file.*Received: kind='backup'"):
        estimator.train(_input_fn(), steps=1)


def test_a_newer_or_unknown_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "model.ckpt-1.pt"
    save_state(path, {"format": FORMAT_VERSION + 1, "kind": "estimator", "counters": {}, "weights": {}})
    with pytest.raises(CheckpointError, match=r"model\.ckpt-1\.pt' was written by a newer stratagem.*Upgrade"):
        training_state.read(path, kind=StateKind.ESTIMATOR)
    small_model().save_weights(str(path))  # weights only: not a training state
    with pytest.raises(CheckpointError, match=r"model\.ckpt-1\.pt' is not a training state.*Received: format=None"):
        training_state.read(path, kind=StateKind.ESTIMATOR)
