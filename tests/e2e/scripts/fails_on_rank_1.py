"""A launched worker with no torch: rank 1 raises, rank 0 waits for it forever. argv: PID_DIR.

Writes its pid to PID_DIR/RANK.pid. ``import stratagem`` (torch-free) installs the
launched worker's exception hook, which records rank 1's error for the launcher.
Rank 0 then waits for a peer that never comes, as in a collective rank 1 never
joins (no worker handles SIGTERM, so a sleeping rank and one blocked in gloo
stop alike): only the launcher ends it.
"""

import os
import sys
import time

import stratagem  # noqa: F401 -- the launched worker's exception hook

rank = os.environ["RANK"]
with open(os.path.join(sys.argv[1], f"{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
if rank == "1":
    time.sleep(0.5)
    raise ValueError("boom on rank 1")
time.sleep(120)
