"""ShardedDataParallelStrategy (FSDP2 on gloo): half the state per rank, DDP's numbers, checkpoints that reshard.

Two spawns. Two ranks train 20 steps under the sharded strategy and, in the
same process group, under MultiWorkerMirroredStrategy (DDP): the weights must
match within 1e-5 (also with clipnorm and gradient accumulation) and each rank
must hold about half of the parameter plus Adam-state bytes; get_weights,
save_weights, load_weights and set_weights see the whole weights. Halfway, they
save a sharded checkpoint (sync and async) and a BackupAndRestore backup; one
replica (in the test's process) and then three ranks load them (resharded) and
train the second half, which must end where the two ranks ended without the
save/load.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import stratagem
from stratagem.callbacks import BackupAndRestore
from stratagem.testing import run_workers
from tests.dist._models import classification_data, small_cnn

pytestmark = pytest.mark.dist

GLOBAL_BATCH = 12  # divides by 1, 2 and 3 replicas
STEPS_PER_EPOCH = 10


def _data() -> tuple[np.ndarray, np.ndarray]:
    return classification_data(GLOBAL_BATCH * STEPS_PER_EPOCH, seed=5)


def _compiled_model(optimizer: stratagem.optimizers.Optimizer | None = None) -> stratagem.Model:
    torch.manual_seed(7)  # the agreed shuffle seed comes from torch's RNG at compile
    model = stratagem.Model(small_cnn())
    model.compile(optimizer=optimizer or stratagem.optimizers.Adam(learning_rate=0.01),
                  loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _clipped_accumulating_adam() -> stratagem.optimizers.Optimizer:
    # clipnorm: per-tensor norms of sharded gradients; accumulation: reduce-scatter on every micro-step.
    return stratagem.optimizers.Adam(learning_rate=0.01, clipnorm=0.05, gradient_accumulation_steps=2)


def _fit(model: stratagem.Model, *, epochs: int, initial_epoch: int = 0, callbacks: list | None = None,
         steps_per_epoch: int | None = None) -> dict:
    x, y = _data()
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=epochs, initial_epoch=initial_epoch, shuffle=False,
                        verbose=0, callbacks=callbacks, steps_per_epoch=steps_per_epoch)
    return history.history


def _full_weights(strategy: stratagem.distribute.Strategy, model: stratagem.Model) -> dict[str, np.ndarray]:
    if isinstance(strategy, stratagem.distribute.ShardsVariables):
        state = strategy.full_state_dict(model.module)
    else:
        state = model.module.state_dict()
    return {key.removeprefix("module."): value.detach().cpu().numpy().copy() for key, value in state.items()}


def _local_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes this process holds for ``tensors`` (a DTensor's local shard, a plain tensor whole)."""
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def _state_bytes(model: stratagem.Model) -> int:
    optimizer_state = [v for s in model.optimizer.torch_optimizer.state.values() for v in s.values()
                       if isinstance(v, torch.Tensor) and v.ndim > 0]  # Adam's scalar step counters aside
    return _local_bytes(list(model.module.parameters())) + _local_bytes(optimizer_state)


def _worker_train_and_save(rank: int, world_size: int, folder: str) -> dict:
    sharded = stratagem.distribute.ShardedDataParallelStrategy()
    mirrored = stratagem.distribute.MultiWorkerMirroredStrategy()  # joins the same process group: DDP
    with mirrored.scope():
        ddp_model = _compiled_model()
        ddp_history = _fit(ddp_model, epochs=2)
        ddp_accumulated = _compiled_model(_clipped_accumulating_adam())
        _fit(ddp_accumulated, epochs=1, steps_per_epoch=4)
    with sharded.scope():
        model = _compiled_model()
        tensorboard = stratagem.callbacks.TensorBoard(log_dir=f"{folder}/logs", histogram_freq=1)  # gathers the weights
        _fit(model, epochs=1, callbacks=[BackupAndRestore(f"{folder}/backup", delete_checkpoint=False), tensorboard])
        halfway = _full_weights(sharded, model)
        checkpoint = stratagem.checkpoint.ShardedCheckpoint(model)
        checkpoint.save(f"{folder}/sync")
        written = checkpoint.save(f"{folder}/async", async_save=True)
        history = _fit(model, epochs=2, initial_epoch=1)  # trains while the async save writes
        assert written.result(timeout=60) == f"{folder}/async"
        x, y = _data()
        evaluation = model.evaluate(x[:37], y[:37], batch_size=8, return_dict=True)
        ddp_evaluation = ddp_model.evaluate(x[:37], y[:37], batch_size=8, return_dict=True)
        accumulated = _compiled_model(_clipped_accumulating_adam())
        _fit(accumulated, epochs=1, steps_per_epoch=4)
        # Keras' weight API on sharded weights: gathered whole, and put back into the shards.
        model.save_weights(f"{folder}/weights.safetensors")  # every replica: the weights are gathered first
        copy = _compiled_model()
        copy.load_weights(f"{folder}/weights.safetensors")
        copy.set_weights([w * 2 for w in copy.get_weights()])
        with pytest.raises(ValueError, match="save_weights"):
            model.save(f"{folder}/saved")
    return {
        "sharded": _full_weights(sharded, model), "ddp": _full_weights(mirrored, ddp_model), "halfway": halfway,
        "history": history, "ddp_history": ddp_history, "evaluate": evaluation, "ddp_evaluate": ddp_evaluation,
        "sharded_bytes": _state_bytes(model), "ddp_bytes": _state_bytes(ddp_model),
        "accumulated": _full_weights(sharded, accumulated), "ddp_accumulated": _full_weights(mirrored, ddp_accumulated),
        "get_weights": model.get_weights(), "copy_doubled": _full_weights(sharded, copy),
    }


def _worker_load_and_continue(rank: int, world_size: int, folder: str) -> dict:
    strategy = stratagem.distribute.ShardedDataParallelStrategy()
    with strategy.scope():
        loaded = {}
        model = _compiled_model()
        for name in ("sync", "async"):  # weights and Adam state, resharded onto this job
            stratagem.checkpoint.ShardedCheckpoint(model).restore(f"{folder}/{name}")
            loaded[name] = _full_weights(strategy, model)
        _fit(model, epochs=2, initial_epoch=1)
        resumed = _compiled_model()
        backup = BackupAndRestore(f"{folder}/backup", delete_checkpoint=False)
        with pytest.warns(UserWarning, match="Backup was taken on 2 replicas"):
            _fit(resumed, epochs=2, callbacks=[backup])
    return {"loaded": loaded, "continued": _full_weights(strategy, model), "resumed": _full_weights(strategy, resumed),
            "restored_from": backup.restored_from}


def _assert_weights_close(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(torch.from_numpy(actual[key]), torch.from_numpy(value), rtol=0, atol=1e-5)


def test_two_ranks_shard_state_match_ddp_and_checkpoints_reshard_onto_one_and_three(tmp_path: Path) -> None:
    trained = run_workers(_worker_train_and_save, world_size=2, args=(str(tmp_path),), timeout_s=120)
    for result in trained:
        # 20 steps of Adam: the sharded strategy computes what DDP computes.
        _assert_weights_close(result["sharded"], result["ddp"])
        np.testing.assert_allclose(result["history"]["loss"], result["ddp_history"]["loss"][1:], rtol=1e-5)
        assert result["evaluate"] == pytest.approx(result["ddp_evaluate"], rel=1e-5)
        _assert_weights_close(result["accumulated"], result["ddp_accumulated"])
        _assert_weights_close(dict(zip(result["sharded"], result["get_weights"])), result["sharded"])
        _assert_weights_close(result["copy_doubled"], {key: 2 * value for key, value in result["sharded"].items()})
    _assert_weights_close(trained[1]["sharded"], trained[0]["sharded"])
    total = trained[0]["ddp_bytes"]  # DDP: every rank holds every parameter and its Adam moments
    for result in trained:
        assert result["ddp_bytes"] == total
        assert 0.4 * total <= result["sharded_bytes"] <= 0.6 * total, (result["sharded_bytes"], total)
    assert sum(r["sharded_bytes"] for r in trained) == pytest.approx(total, rel=0.05)  # shards cover it once
    assert not list(tmp_path.glob(".*.partial")), "a finished save leaves no partial folder"
    # TensorBoard's histograms are of the whole weights, not of the chief's shards.
    from tensorboard.backend.event_processing import event_accumulator

    logs = event_accumulator.EventAccumulator(str(tmp_path / "logs" / "train"), size_guidance={"histograms": 0})
    logs.Reload()
    for key, value in trained[0]["halfway"].items():
        (histogram,) = logs.Histograms(key.replace(".", "/") + "/histogram")
        assert histogram.histogram_value.num == value.size
        assert histogram.histogram_value.sum == pytest.approx(float(value.sum()), abs=1e-4)

    backup_for_three = tmp_path / "three"
    backup_for_three.mkdir()
    shutil.copytree(tmp_path / "backup", backup_for_three / "backup")  # the one-rank run adds its own backups
    for name in ("sync", "async"):
        shutil.copytree(tmp_path / name, backup_for_three / name)
    # One replica needs no process group: it runs here, which saves a spawn (and its seconds of imports).
    one = [_worker_load_and_continue(0, 1, str(tmp_path))]
    three = run_workers(_worker_load_and_continue, world_size=3, args=(str(backup_for_three),), timeout_s=120)
    for results, folder in ((one, tmp_path), (three, backup_for_three)):
        for result in results:
            _assert_weights_close(result["loaded"]["sync"], trained[0]["halfway"])
            _assert_weights_close(result["loaded"]["async"], trained[0]["halfway"])
            _assert_weights_close(result["continued"], trained[0]["sharded"])
            _assert_weights_close(result["resumed"], trained[0]["sharded"])
            assert result["restored_from"] == str(folder / "backup" / "backup-1.pt")
