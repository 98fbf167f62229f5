"""The crafted checkpoint of issue 21 on every loading path: no code runs, and a CheckpointError names the file.

The payload is a pickle (protocol 4) that names ``torch.distributed.checkpoint.filesystem`` and then
``os.system``: pickle follows the dotted name to ``os.system``, so an allow-list by module prefix runs its
command. Each path gets it where that path reads a pickle (or, for the data formats, in place of the file),
both bare and inside torch.save's zip layout; the command would create a marker file.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

import stratagem
from stratagem.callbacks import BackupAndRestore
from stratagem.checkpoint import ShardedCheckpoint, load_sharded, load_state
from stratagem.errors import CheckpointError
from tests.unit.checkpoint._small import small_data, small_model

_UNSAFE = "could run code"


def _payload(marker: Path) -> bytes:
    """The issue's bytes: ``torch.distributed.checkpoint.filesystem`` + ``os.system`` with a command."""
    command = f"touch '{marker}'".encode()
    assert len(command) < 256  # SHORT_BINUNICODE holds a one-byte length
    return (b"\x80\x04\x8c'torch.distributed.checkpoint.filesystem\x94\x8c\tos.system\x94\x93\x8c"
            + bytes([len(command)]) + command + b"\x85R.")


def _zipped_payload(marker: Path) -> bytes:
    """The same call in torch.save's zip layout, with protocol 2's GLOBAL opcode (the one torch's reader reads)."""
    command = f"touch '{marker}'".encode()
    pickled = (b"\x80\x02ctorch.distributed.checkpoint.filesystem\nos.system\nX" + len(command).to_bytes(4, "little")
               + command + b"\x85R.")
    buffer = io.BytesIO()
    torch.save({}, buffer)
    crafted = io.BytesIO()
    with zipfile.ZipFile(buffer) as original, zipfile.ZipFile(crafted, "w") as out:
        for info in original.infolist():
            out.writestr(info, pickled if info.filename.endswith("/data.pkl") else original.read(info))
    return crafted.getvalue()


@pytest.fixture(params=["bare", "zipped"])
def crafted(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[bytes, Path]:
    marker = tmp_path / "ran"
    return (_payload(marker) if request.param == "bare" else _zipped_payload(marker)), marker


def test_the_payload_runs_its_command_under_plain_pickle(tmp_path: Path) -> None:
    # The test's own check: the bytes are the attack (pickle.loads would run it), so a refusal below means something.
    import pickle

    marker = tmp_path / "ran"
    pickle.loads(_payload(marker))
    assert marker.exists()


def test_sharded_metadata(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    model = small_model()
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    (tmp_path / "ckpt" / ".metadata").write_bytes(_payload(marker))
    with pytest.raises(CheckpointError, match=rf"ckpt/\.metadata.*{_UNSAFE}.*os\.system"):
        ShardedCheckpoint(model).restore(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=_UNSAFE):
        load_sharded(tmp_path / "ckpt", model)
    assert not marker.exists()


def test_load_state_and_load_weights(tmp_path: Path, crafted: tuple[bytes, Path]) -> None:
    payload, marker = crafted
    path = tmp_path / "weights.pt"
    path.write_bytes(payload)
    with pytest.raises(CheckpointError, match=rf"weights\.pt.*{_UNSAFE}"):
        load_state(path)
    with pytest.raises(CheckpointError, match=rf"weights\.pt.*{_UNSAFE}"):
        small_model().load_weights(str(path))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["weights.safetensors", "model.pt2", "metadata.json"])
def test_load_model(tmp_path: Path, crafted: tuple[bytes, Path], name: str) -> None:
    payload, marker = crafted
    model = small_model()
    model.fit(*small_data(), epochs=1, verbose=0)
    model.save(str(tmp_path / "saved"))
    (tmp_path / "saved" / name).write_bytes(payload)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        stratagem.models.load_model(str(tmp_path / "saved"))
    if name == "weights.safetensors":  # load_weights of a model.save folder reads its weights only
        with pytest.raises(CheckpointError, match=r"weights\.safetensors"):
            small_model().load_weights(str(tmp_path / "saved"))
    assert not marker.exists()


def test_backup_and_restore_file(tmp_path: Path, crafted: tuple[bytes, Path]) -> None:
    payload, marker = crafted
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "backup-1.pt").write_bytes(payload)
    with pytest.raises(CheckpointError, match=rf"backup-1\.pt.*{_UNSAFE}"), pytest.warns(UserWarning, match="Skipping"):
        small_model().fit(*small_data(), epochs=1, verbose=0, callbacks=[BackupAndRestore(tmp_path / "backup")])
    assert not marker.exists()


def test_backup_and_restore_sharded_training_state(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    strategy = stratagem.distribute.ShardedDataParallelStrategy()  # one replica: shards beside the backup file
    with strategy.scope():
        model = small_model()
    with pytest.raises(KeyboardInterrupt):  # killed in epoch 2, after the backup of epoch 1
        model.fit(*small_data(), epochs=2, verbose=0, callbacks=[BackupAndRestore(tmp_path / "backup"), _StopInEpoch2()])
    assert (tmp_path / "backup" / "backup-1.shards" / ".metadata").is_file()
    (tmp_path / "backup" / "backup-1.shards" / ".metadata").write_bytes(_payload(marker))
    with strategy.scope():
        again = small_model()
    with pytest.raises(CheckpointError, match=rf"backup-1\.shards.*{_UNSAFE}"):
        again.fit(*small_data(), epochs=2, verbose=0, callbacks=[BackupAndRestore(tmp_path / "backup")])
    assert not marker.exists()


class _StopInEpoch2(stratagem.callbacks.Callback):
    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if epoch == 1:
            raise KeyboardInterrupt


def test_estimator_checkpoint(tmp_path: Path, crafted: tuple[bytes, Path]) -> None:
    from stratagem.data import Dataset
    from stratagem.estimator import model_to_estimator

    payload, marker = crafted
    x, y = small_data()
    input_fn = lambda: Dataset.from_tensor_slices((x, y)).batch(4)  # noqa: E731
    (tmp_path / "model.ckpt-5.pt").write_bytes(payload)
    estimator = model_to_estimator(small_model(), model_dir=str(tmp_path))
    with pytest.raises(CheckpointError, match=rf"model\.ckpt-5\.pt.*{_UNSAFE}"):
        estimator.train(input_fn, steps=1)
    with pytest.raises(CheckpointError, match=rf"model\.ckpt-5\.pt.*{_UNSAFE}"):
        estimator.evaluate(input_fn)
    assert not marker.exists()


def test_elastic_state(tmp_path: Path, crafted: tuple[bytes, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import stratagem.horovod as hvd
    from stratagem.horovod.elastic import STATE_FILE_ENV, TorchState

    payload, marker = crafted
    (tmp_path / "state.pt").write_bytes(payload)
    monkeypatch.setenv(STATE_FILE_ENV, str(tmp_path / "state.pt"))
    module = nn.Linear(3, 1)
    state = TorchState(module, torch.optim.SGD(module.parameters(), lr=0.1), epoch=0)

    @hvd.elastic.run
    def train(state: TorchState) -> int:
        return state.epoch

    hvd.init()
    try:
        with pytest.raises(CheckpointError, match=rf"state\.pt.*{_UNSAFE}"):
            train(state)
    finally:
        hvd.shutdown()
    assert not marker.exists()


@pytest.mark.parametrize("name", ["data.0.npz", "data.index.json"])
def test_data_cache(tmp_path: Path, crafted: tuple[bytes, Path], name: str) -> None:
    from stratagem.data import Dataset

    payload, marker = crafted
    prefix = str(tmp_path / "data")
    assert [int(v) for v in Dataset.range(5).cache(prefix)] == list(range(5))  # writes the cache
    (tmp_path / name).write_bytes(payload)
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        list(Dataset.range(5).cache(prefix))
    assert not marker.exists()


def test_a_real_sharded_metadata_names_only_allowed_globals(tmp_path: Path) -> None:
    # What DCP writes must load: the exact list is complete for weights, Adam state and hyperparameters.
    from stratagem.checkpoint.unpickling import unpickle

    model = small_model()
    model.fit(*small_data(), epochs=1, verbose=0)
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    metadata = unpickle((tmp_path / "ckpt" / ".metadata").read_bytes(), path="metadata")
    assert type(metadata).__name__ == "Metadata" and any("optimizer" in key for key in metadata.state_dict_metadata)
