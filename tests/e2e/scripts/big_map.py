"""A replica whose parallel map returns 128 KiB elements, iterated slowly; argv PID_DIR.

Each replica writes its pid and its map workers' pids to PID_DIR once the map
workers run, then consumes one element a second, so the workers' result pipes
fill up and their feeder threads block (the case that left them orphaned).
"""

import os
import sys
import time

import numpy as np

import stratagem
from stratagem.data import Dataset

pid_dir = sys.argv[1]
strategy = stratagem.distribute.MirroredStrategy()  # joins the group: rank 0 listens on MASTER_PORT


def big(i):
    time.sleep(0.002)  # long enough that AUTOTUNE's calibration picks workers
    return np.full(32768, i, dtype=np.float32)  # 128 KiB, more than a pipe holds


iterator = iter(Dataset.range(10**9).map(big, num_parallel_calls=2))
next(iterator), next(iterator), next(iterator), next(iterator), next(iterator)
children = [p.pid for p in __import__("multiprocessing").active_children()]
rank = strategy.replica_id_in_sync_group
with open(os.path.join(pid_dir, f"{rank}.tmp"), "w") as f:
    f.write(" ".join(str(p) for p in [os.getpid(), *children]))
os.replace(os.path.join(pid_dir, f"{rank}.tmp"), os.path.join(pid_dir, f"{rank}.pid"))
while True:
    next(iterator)
    time.sleep(1)
