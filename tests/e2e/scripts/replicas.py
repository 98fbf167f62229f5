"""A user script: MirroredStrategy with two CPU replicas, launched or self-launching.

argv: PID_DIR [fail]. Writes its pid to PID_DIR/RANK.pid. With 'fail', rank 1
raises while rank 0 waits in a collective it would never leave on its own.
"""

import os
import sys
import time

import torch

import stratagem

strategy = stratagem.distribute.MirroredStrategy(num_replicas=2)
rank = strategy.replica_id_in_sync_group
with open(os.path.join(sys.argv[1], f"{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
if len(sys.argv) > 2 and sys.argv[2] == "fail":
    if rank == 1:
        time.sleep(0.5)
        raise ValueError("boom on rank 1")
    strategy.reduce("sum", torch.ones(1), axis=None)  # blocks: rank 1 never joins
total = strategy.reduce("sum", torch.tensor(float(rank + 1)), axis=None)
print(f"replica {rank} of {strategy.num_replicas_in_sync}: sum={total.item():g}")
