"""Two replicas train; at step 3 rank STOP_RANK stops itself (argv: STOP_RANK, then 'stop' or 'kill').

'stop' sends itself SIGSTOP, as a hung or frozen machine; 'kill' SIGKILLs itself. Its peer is
then inside DDP's gradient all-reduce, waiting for it.
"""

import os
import signal
import sys

import numpy as np
from torch import nn

import stratagem
from stratagem.callbacks import Callback

stop_rank, how = int(sys.argv[1]), sys.argv[2]
strategy = stratagem.distribute.MirroredStrategy()


class StopAt(Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 3 and strategy.replica_id_in_sync_group == stop_rank:
            print("stopping myself", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP if how == "stop" else signal.SIGKILL)


rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype(np.float32)
with strategy.scope():
    model = stratagem.Model(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    model.compile(optimizer="sgd", loss="mse")
model.fit(x, x[:, :2], batch_size=8, epochs=1, verbose=0, callbacks=[StopAt()])
