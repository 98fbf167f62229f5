"""A user script: MirroredStrategy with two CPU replicas, self-launching. argv: PID_DIR.

Writes its pid to PID_DIR/RANK.pid.
"""

import os
import sys

import torch

import stratagem

strategy = stratagem.distribute.MirroredStrategy(num_replicas=2)
rank = strategy.replica_id_in_sync_group
with open(os.path.join(sys.argv[1], f"{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
total = strategy.reduce("sum", torch.tensor(float(rank + 1)), axis=None)
print(f"replica {rank} of {strategy.num_replicas_in_sync}: sum={total.item():g}")
