"""A worker that does nothing but sleep (no torch import, so it starts fast). argv: PID_DIR."""

import os
import sys
import time

with open(os.path.join(sys.argv[1], f"{os.environ['RANK']}.pid"), "w") as f:
    f.write(str(os.getpid()))
print("sleeping", flush=True)
time.sleep(120)
