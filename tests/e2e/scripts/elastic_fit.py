"""fit with BackupAndRestore under an elastic job; logs every completed step's example ids.

argv: OUT EPOCHS DELAY_S. Each step appends {epoch, batch, attempt, rank,
world_size, ids} to OUT/steps-RANK-PID.jsonl, where ``attempt`` is rank 0's
start time (the same on every rank of one start), then sleeps DELAY_S until
the test writes OUT/fast (it has nothing left to do mid-epoch); rank 0 writes
the final accuracy to OUT/result.json. The last column of x is the example's id, which
the model reads off and ignores.
"""

import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

import stratagem
from stratagem.callbacks import BackupAndRestore, Callback

out, epochs, delay_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.set_num_threads(1)
strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
rank, world_size = strategy.replica_id_in_sync_group, strategy.num_replicas_in_sync
start = torch.tensor(time.time() if rank == 0 else 0.0, dtype=torch.float64)
attempt = float(strategy.reduce("sum", start, axis=None))
NUM_EXAMPLES = 360
rng = np.random.default_rng(0)
x = rng.normal(size=(NUM_EXAMPLES, 8)).astype("float32")
y = (x @ rng.normal(size=8) > 0).astype("int64")
x_with_ids = np.concatenate([x, np.arange(NUM_EXAMPLES, dtype="float32")[:, None]], axis=1)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        self.seen: list[int] = []

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.extend(inputs[:, -1].long().tolist())
        return self.body(inputs[:, :-1])


class LogSteps(Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        net = self.model.module
        record = {"epoch": self.epoch, "batch": batch, "attempt": attempt, "rank": rank,
                  "world_size": world_size, "ids": net.seen}
        with open(os.path.join(out, f"steps-{rank}-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
        net.seen = []
        if not os.path.exists(os.path.join(out, "fast")):
            time.sleep(delay_s)  # a slow step, so the test can act mid-epoch


torch.manual_seed(0)
with strategy.scope():
    model = stratagem.Model(Net())
    model.compile(optimizer=stratagem.optimizers.SGD(0.1), metrics=["accuracy"],
                  loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
# A backup after every step: a restart repeats at most the step a failure interrupted.
model.fit(x_with_ids, y, batch_size=12, epochs=epochs, verbose=0,
          callbacks=[LogSteps(), BackupAndRestore(os.path.join(out, "backup"), save_freq=1)])
accuracy = model.evaluate(x_with_ids, y, batch_size=12, verbose=0, return_dict=True)["accuracy"]
print(f"done on {world_size} workers, accuracy {accuracy:.4f}", flush=True)
if rank == 0:
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"accuracy": accuracy, "world_size": world_size}, f)
