"""ShardedCheckpoint in one process: round trip, atomic folder, and refusal of unsafe or incomplete checkpoints."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.checkpoint import ShardedCheckpoint
from stratagem.errors import CheckpointError


def _model(optimizer: object = "adam") -> stratagem.Model:
    torch.manual_seed(0)
    model = stratagem.Model(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
    model.compile(optimizer=optimizer, loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _train(model: stratagem.Model, steps: int = 3) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8 * steps, 4)).astype(np.float32), rng.integers(0, 3, size=8 * steps)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)


def test_restore_gives_back_weights_and_optimizer_state_and_training_continues_identically(tmp_path: Path) -> None:
    model = _model()
    _train(model)
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / ".metadata").is_file() and not (tmp_path / ".ckpt.partial").exists()
    restored = _model()
    ShardedCheckpoint(restored).restore(tmp_path / "ckpt")
    for key, value in model.module.state_dict().items():
        torch.testing.assert_close(restored.module.state_dict()[key], value, rtol=0, atol=0)
    _train(model)
    _train(restored)
    for key, value in model.module.state_dict().items():
        torch.testing.assert_close(restored.module.state_dict()[key], value, rtol=0, atol=0)


def test_saving_a_stateless_optimizer_leaves_its_step_count_alone(tmp_path: Path) -> None:
    # Before any step (no gradients, no state) DCP initialises the optimizer with one zero
    # step at lr 0; the Keras rules count steps in param_groups, so it would add one.
    def schedule() -> object:
        return stratagem.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)

    model = _model(stratagem.optimizers.SGD(learning_rate=schedule()))
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    groups = model.optimizer.torch_optimizer.param_groups
    assert [(g["iterations"], g["lr"]) for g in groups] == [(0, pytest.approx(0.1))]
    restored = _model(stratagem.optimizers.SGD(learning_rate=schedule()))
    ShardedCheckpoint(restored).restore(tmp_path / "ckpt")
    assert [g["iterations"] for g in restored.optimizer.torch_optimizer.param_groups] == [0]
    _train(model)
    _train(restored)
    torch.testing.assert_close(restored.module[0].weight, model.module[0].weight, rtol=0, atol=0)


def test_save_over_an_existing_checkpoint_replaces_it(tmp_path: Path) -> None:
    model = _model()
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    _train(model)
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    restored = _model()
    ShardedCheckpoint(restored).restore(tmp_path / "ckpt")
    torch.testing.assert_close(restored.module[0].weight, model.module[0].weight, rtol=0, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_async_save_future_gives_the_folder_once_written(tmp_path: Path) -> None:
    model = _model()
    _train(model)
    future = ShardedCheckpoint(model).save(tmp_path / "ckpt", async_save=True)
    assert future is not None and future.result(timeout=30) == str(tmp_path / "ckpt")
    restored = _model()
    ShardedCheckpoint(restored).restore(tmp_path / "ckpt")
    torch.testing.assert_close(restored.module[2].bias, model.module[2].bias, rtol=0, atol=0)


def test_unfinished_save_raises_checkpoint_error(tmp_path: Path) -> None:
    model = _model()
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    (tmp_path / "ckpt").rename(tmp_path / ".ckpt.partial")  # what a killed save leaves
    with pytest.raises(CheckpointError, match="No complete sharded checkpoint"):
        ShardedCheckpoint(model).restore(tmp_path / "ckpt")


class _RunsCode:
    def __reduce__(self) -> tuple:
        return (Path.touch, (Path(_SENTINEL[0]),))


_SENTINEL: list[str] = []


def test_metadata_that_would_run_code_is_refused(tmp_path: Path) -> None:
    model = _model()
    ShardedCheckpoint(model).save(tmp_path / "ckpt")
    _SENTINEL[:] = [str(tmp_path / "ran")]
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(_RunsCode()))
    with pytest.raises(CheckpointError, match="could run code"):
        ShardedCheckpoint(model).restore(tmp_path / "ckpt")
    assert not (tmp_path / "ran").exists()
