"""Callbacks on two replicas: every replica decides the same, only the chief writes, both match one replica.

One spawn: two gloo workers run MirroredStrategy(num_replicas=2) with
ModelCheckpoint(save_best_only), EarlyStopping, ReduceLROnPlateau,
TensorBoard and CSVLogger together, writing into one shared folder; then
LearningRateScheduler, TerminateOnNaN and LambdaCallback in a second fit. The
parent runs the same scenario on one replica into another folder. The
monitored ``val_loss`` is scripted, so the expected decisions are known; the
real loss and metrics come from the reduced logs.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import stratagem
from stratagem.callbacks import (
    Callback, CSVLogger, EarlyStopping, LambdaCallback, LearningRateScheduler, ModelCheckpoint,
    ReduceLROnPlateau, TensorBoard, TerminateOnNaN,
)
from stratagem.checkpoint import io as checkpoint_io
from stratagem.testing import run_workers
from tests.unit.callbacks._fakes import BATCH_SIZE, ScriptedLogs, compiled_model, data

pytestmark = pytest.mark.dist

EPOCHS = 8
VAL_LOSS = [1.0, 0.8, 0.9, 0.7, 0.75, 0.72, 0.71, 0.6]
# With patience 2, EarlyStopping stops at epoch 5; improvements (checkpoints) at epochs 0, 1, 3;
# ReduceLROnPlateau(factor=0.5, patience=1) halves the rate after epochs 2, 4 and 5.
EXPECTED_STOPPED_EPOCH = 5
EXPECTED_RATES = [0.1, 0.1, 0.1, 0.05, 0.05, 0.025]
EXPECTED_CHECKPOINTS = ["w.01.safetensors", "w.02.safetensors", "w.04.safetensors"]


class _RateAtEpochBegin(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.rates: list[float] = []

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.rates.append(self.model.optimizer.learning_rate)


def _scenario(log_dir: str) -> dict:
    """Trains with every writing and deciding callback; returns what this replica saw and wrote."""
    written: list[str] = []
    checkpoint_io._BEFORE_RENAME_HOOK.append(written.append)  # sees every atomic write of this process
    early = EarlyStopping(patience=2, restore_best_weights=True)
    rates = _RateAtEpochBegin()
    callbacks = [
        ScriptedLogs("val_loss", VAL_LOSS),
        ModelCheckpoint(os.path.join(log_dir, "ckpt", "w.{epoch:02d}.safetensors"), save_best_only=True),
        early, ReduceLROnPlateau(factor=0.5, patience=1),
        TensorBoard(os.path.join(log_dir, "tb"), update_freq=2),
        # append=True: a replica that wrote too would add its own rows (with "w" it would
        # silently overwrite the chief's identical bytes, and no test could see it).
        CSVLogger(os.path.join(log_dir, "log.csv"), append=True), rates,
    ]
    x, y = data()
    model = compiled_model()
    try:
        history = model.fit(x, y, batch_size=BATCH_SIZE, epochs=EPOCHS, shuffle=False, verbose=0,
                            validation_data=data(16, seed=1), callbacks=callbacks)
    finally:
        checkpoint_io._BEFORE_RENAME_HOOK.remove(written.append)
    return {
        "stopped_epoch": early.stopped_epoch, "rates": rates.rates, "history": history.history,
        "weights": {k: v.detach().cpu().numpy() for k, v in model.module.state_dict().items()},
        "num_checkpoint_writes": len(written),
    }


POISON_AT_BATCH = 18  # the 18th batch overall: epoch 4 (4 batches per epoch), its 2nd batch


def decay(epoch: int) -> float:
    """The seed notebook's schedule."""
    return 1e-3 if epoch < 3 else (1e-4 if epoch < 7 else 1e-5)


def _scenario_schedule_and_nan() -> dict:
    """LearningRateScheduler, and TerminateOnNaN on a loss made NaN (by a LambdaCallback) at a known batch."""
    seen = {"batches": 0}
    model = compiled_model()

    def poison(batch: int, logs: dict | None) -> None:
        seen["batches"] += 1
        if seen["batches"] == POISON_AT_BATCH:  # every replica poisons its copy: the weights stay identical
            with torch.no_grad():
                model.module.weight.fill_(float("nan"))

    rates = _RateAtEpochBegin()
    x, y = data()
    history = model.fit(x, y, batch_size=BATCH_SIZE, epochs=EPOCHS, shuffle=False, verbose=0,
                        callbacks=[LambdaCallback(on_train_batch_begin=poison), LearningRateScheduler(decay),
                                   TerminateOnNaN(), rates])
    return {"rates": rates.rates, "batches": seen["batches"], "epochs_logged": len(history.epoch),
            "learning_rate_logs": history.history.get("learning_rate", [])}


def _worker_callbacks(rank: int, world_size: int, log_dir: str) -> dict:
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    with strategy.scope():
        result = _scenario(log_dir)
        result["schedule_and_nan"] = _scenario_schedule_and_nan()
        return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("callbacks")
    two = run_workers(_worker_callbacks, world_size=2, args=(str(root / "two"),), timeout_s=90)
    one = _scenario(str(root / "one"))
    one["schedule_and_nan"] = _scenario_schedule_and_nan()
    return {"one": one, "two": two, "root": root}


def test_schedule_lambda_and_nan_stop_agree_on_every_replica(runs: dict) -> None:
    expected_rates = [decay(epoch) for epoch in range(5)]
    for result in (runs["one"], *runs["two"]):
        observed = result["schedule_and_nan"]
        assert observed["rates"] == pytest.approx(expected_rates, rel=1e-12)
        assert observed["batches"] == POISON_AT_BATCH  # TerminateOnNaN stopped right after the NaN batch
        assert observed["epochs_logged"] == 5


def test_replicas_decide_identically_and_match_one_replica(runs: dict) -> None:
    reference, (chief, other) = runs["one"], runs["two"]
    for result in (reference, chief, other):
        assert result["stopped_epoch"] == EXPECTED_STOPPED_EPOCH
        assert result["rates"] == pytest.approx(EXPECTED_RATES, rel=1e-12)
    assert chief["history"] == other["history"]  # the logs are reduced: bit-identical on every replica
    for key, values in reference["history"].items():
        np.testing.assert_allclose(chief["history"][key], values, rtol=1e-5, err_msg=key)


def test_restored_best_weights_match_across_replicas_and_one_replica(runs: dict) -> None:
    reference, (chief, other) = runs["one"], runs["two"]
    for name, expected in reference["weights"].items():
        np.testing.assert_array_equal(chief["weights"][name], other["weights"][name])
        np.testing.assert_allclose(chief["weights"][name], expected, rtol=0, atol=1e-6, err_msg=name)


def test_only_the_chief_writes_each_checkpoint_once(runs: dict) -> None:
    chief, other = runs["two"]
    assert sorted(os.listdir(runs["root"] / "two" / "ckpt")) == EXPECTED_CHECKPOINTS
    assert chief["num_checkpoint_writes"] == len(EXPECTED_CHECKPOINTS)
    assert other["num_checkpoint_writes"] == 0
    assert runs["one"]["num_checkpoint_writes"] == len(EXPECTED_CHECKPOINTS)


def test_tensorboard_writes_one_event_file_per_folder_like_one_replica(runs: dict) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    scalars = {}
    for run in ("one", "two"):
        for folder in ("train", "validation"):
            path = Path(runs["root"]) / run / "tb" / folder
            assert len([n for n in os.listdir(path) if n.startswith("events.out.tfevents")]) == 1, (run, folder)
            accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={"scalars": 0})
            accumulator.Reload()
            scalars[run, folder] = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
                                    for tag in accumulator.Tags()["scalars"] if tag != "epoch_samples_per_sec"}
    for folder in ("train", "validation"):
        one, two = scalars["one", folder], scalars["two", folder]
        assert sorted(one) == sorted(two)
        for tag in one:
            assert [step for step, _ in two[tag]] == [step for step, _ in one[tag]], tag
            np.testing.assert_allclose([v for _, v in two[tag]], [v for _, v in one[tag]], rtol=1e-5, err_msg=tag)
    assert [step for step, _ in scalars["two", "train"]["batch_loss"]] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]


def test_csv_has_each_epoch_once_like_one_replica(runs: dict) -> None:
    paths = {run: Path(runs["root"]) / run / "log.csv" for run in ("one", "two")}
    # One header and one row per epoch: a second writer would have appended its own.
    assert len(paths["two"].read_text().splitlines()) == 1 + EXPECTED_STOPPED_EPOCH + 1
    rows = {run: list(csv.DictReader(path.open(newline=""))) for run, path in paths.items()}
    assert [row["epoch"] for row in rows["two"]] == [str(epoch) for epoch in range(EXPECTED_STOPPED_EPOCH + 1)]
    for one, two in zip(rows["one"], rows["two"]):
        assert one.keys() == two.keys()
        for key in one:
            assert float(two[key]) == pytest.approx(float(one[key]), rel=1e-5), key
