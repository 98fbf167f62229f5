"""Model.fit under ParameterServerStrategy with batch-level callbacks; each task writes what its callbacks saw.

argv: OUT_DIR. Every task writes OUT_DIR/<task_type><task_id>.json: the batch hooks its
callbacks received (step numbers, whether the logs held a finite loss), and the chief
also the weights it started from. ModelCheckpoint(save_freq=3) writes OUT_DIR/ckpt-E-B.weights.pt.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

import stratagem

EPOCHS, STEPS, SAVE_FREQ = 2, 6, 3


class Recorder(stratagem.callbacks.Callback):
    """Notes every batch hook and whether its logs hold a finite loss."""

    stops_training = "never"

    def __init__(self) -> None:
        super().__init__()
        self.begins: list[int] = []
        self.ends: list[list] = []

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        self.begins.append(batch)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        loss = (logs or {}).get("loss")
        self.ends.append([batch, loss is not None and math.isfinite(loss), self.fit_state.step])


def main() -> None:
    out = Path(sys.argv[1])
    strategy = stratagem.distribute.ParameterServerStrategy()
    with strategy.scope():
        torch.manual_seed(0)
        model = stratagem.Model(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)))
        model.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    initial = [w.tolist() for w in model.get_weights()]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype(np.float32)
    y = x[:, :3].argmax(axis=1).astype(np.int64)
    recorder = Recorder()
    checkpoint = stratagem.callbacks.ModelCheckpoint(str(out / "ckpt-{epoch}-{batch}.weights.pt"),
                                                     save_freq=SAVE_FREQ, save_weights_only=True)
    model.fit(x, y, batch_size=16, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=1,
              callbacks=[recorder, checkpoint])
    task = f"{strategy.task_type}{strategy.task_id}"
    (out / f"{task}.json").write_text(json.dumps({"begins": recorder.begins, "ends": recorder.ends,
                                                   "initial": initial}))


if __name__ == "__main__":
    main()
