"""A training job that may be killed: argv BACKUP_DIR OUT_FILE KILL_STEP KILL_RANK [FITS] (KILL_STEP -1: never).

Two CPU replicas, BackupAndRestore every 2 batches, and a LearningRateScheduler
whose schedule reads the current rate (``lr * 0.7`` each epoch: applied twice
after a resume, it would stay off). FITS (default 1) fits run one after the
other on the same backup folder. On the first start only
(STRATAGEM_RESTART_COUNT == 0), rank KILL_RANK SIGKILLs itself after KILL_STEP
batches in total, as a preempted machine would die. The chief writes the
final weights to OUT_FILE.
"""

import os
import signal
import sys

import numpy as np
import torch
from torch import nn

import stratagem
from stratagem.callbacks import BackupAndRestore, Callback, LearningRateScheduler

backup_dir, out_file, kill_step, kill_rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fits = int(sys.argv[5]) if len(sys.argv) > 5 else 1
strategy = stratagem.distribute.MirroredStrategy(num_replicas=2)


class KillAt(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1
        if os.environ.get("STRATAGEM_SOAK_STEPS") and strategy.is_chief:
            print(f"STEP {batch}", flush=True)  # the soak counts steps run, repeats included
        first_start = os.environ.get("STRATAGEM_RESTART_COUNT", "0") == "0"
        if first_start and self.count == kill_step and strategy.replica_id_in_sync_group == kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)


rng = np.random.default_rng(0)
x = rng.normal(size=(200, 8)).astype(np.float32)
y = x[:, :4].argmax(1)
torch.manual_seed(0)
with strategy.scope():
    model = stratagem.Model(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4)))
    model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
kill = KillAt()  # counts batches across fits
for _ in range(fits):
    schedule = LearningRateScheduler(lambda epoch, lr: lr * 0.7)
    model.fit(x, y, batch_size=16, epochs=3, verbose=0,
              callbacks=[kill, schedule, BackupAndRestore(backup_dir, save_freq=2)])
model.save_weights(out_file)
