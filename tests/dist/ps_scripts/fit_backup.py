"""Model.fit under ParameterServerStrategy with BackupAndRestore, 5 epochs of 30 steps on digits.

argv: BACKUP_DIR OUT_JSON MARKER_DIR. Drops `epoch_N_done` markers (chief)
so a test can kill a server mid-job; a second run resumes from the backup.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

import stratagem
from stratagem.datasets import digits


class Markers(stratagem.callbacks.Callback):
    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder, self.epochs = folder, []

    def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
        self.epochs.append(epoch)

    def on_epoch_end(self, epoch: int, logs: object = None) -> None:
        if self.model.distribute_strategy.is_chief:
            (self.folder / f"epoch_{epoch}_done").write_text("ok")


def main() -> None:
    backup, out, markers = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    x_train, x_test = x_train.astype(np.float32) / 255.0, x_test.astype(np.float32) / 255.0
    strategy = stratagem.distribute.ParameterServerStrategy()
    with strategy.scope():
        torch.manual_seed(0)
        model = stratagem.Model(nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)))
        model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    backup_cb, marker_cb = stratagem.callbacks.BackupAndRestore(backup), Markers(markers)
    model.fit(x_train, y_train, batch_size=64, epochs=5, steps_per_epoch=30, verbose=0,
              callbacks=[marker_cb, backup_cb])
    result = model.evaluate(x_test, y_test, batch_size=250, verbose=0, return_dict=True)
    if strategy.is_chief:
        with open(out, "w") as f:
            json.dump({"evaluate": result, "epochs_run": marker_cb.epochs, "restored_from": backup_cb.restored_from}, f)


if __name__ == "__main__":
    main()
