"""A worker that joins the job's process group, says so, and waits to be told to end. argv: DIR.

Writes DIR/ready-RANK once the group works (its store and gloo listen by
then), then waits (at most 60 s) for the file DIR/go.
"""

import os
import sys
import time

import torch

import stratagem

strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
strategy.reduce("sum", torch.ones(1), axis=None)  # the group's connections are up
open(os.path.join(sys.argv[1], f"ready-{strategy.replica_id_in_sync_group}"), "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(sys.argv[1], "go")) and time.monotonic() < deadline:
    time.sleep(0.1)
