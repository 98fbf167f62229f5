"""Steps that let a test kill worker 1 while it holds a step, then see the restarted worker 1 rejoin.

argv: OUT_JSON MARKER_DIR. Phase 1 (40 steps): worker 1's first incarnation
pushes its third step, drops a `holding` marker and sleeps until it is
killed; the step is rescheduled. The chief drops `phase1_done` after
joining. Phase 2 (20 steps): worker 0's first phase-2 step waits for the
restarted worker 1 to run one (`rejoined_ran` marker), so the rejoin is
shown without any timing assumption.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import stratagem
from tests.dist._models import classification_data, small_cnn

PHASE1, PHASE2, BATCH = 40, 20, 8


def main() -> None:
    out, markers = sys.argv[1], Path(sys.argv[2])
    incarnation = int(os.environ.get("STRATAGEM_RESTART_COUNT", "0"))
    strategy = stratagem.distribute.ParameterServerStrategy()
    coordinator = stratagem.distribute.ClusterCoordinator(strategy)
    with strategy.scope():
        net = small_cnn()
        module = strategy.distribute_module(net)
        optimizer = strategy.distribute_optimizer(torch.optim.SGD(net.parameters(), lr=0.05))
    me = (strategy.task_type, strategy.task_id, incarnation)
    ran = {"count": 0, "waited": False}

    def train(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        F.cross_entropy(module(x), y).backward()
        optimizer.step()

    def batches(context: object) -> object:
        x, y = classification_data(BATCH * 200, seed=int(getattr(context, "input_pipeline_id", 0)))
        return iter([(torch.from_numpy(x[i : i + BATCH]), torch.from_numpy(y[i : i + BATCH]))
                     for i in range(0, len(x), BATCH)])

    def phase1_step(iterator: object) -> list[int]:
        strategy.run(train, args=next(iterator))  # type: ignore[call-overload]
        ran["count"] += 1
        if me == ("worker", 1, 0) and ran["count"] == 3:
            (markers / "holding").write_text("pushed; waiting to be killed")
            time.sleep(300)
        time.sleep(0.02)
        return [strategy.task_id, incarnation]

    def phase2_step(iterator: object) -> list[int]:
        if me == ("worker", 0, 0) and not ran["waited"]:
            ran["waited"] = True
            deadline = time.monotonic() + 90
            while not (markers / "rejoined_ran").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        strategy.run(train, args=next(iterator))  # type: ignore[call-overload]
        if me[:2] == ("worker", 1) and incarnation > 0:
            (markers / "rejoined_ran").write_text("ok")
        return [strategy.task_id, incarnation]

    iterator = iter(coordinator.create_per_worker_dataset(batches))
    first = [coordinator.schedule(phase1_step, args=(iterator,)) for _ in range(PHASE1)]
    coordinator.join()
    if strategy.is_chief:
        (markers / "phase1_done").write_text("ok")
    second = [coordinator.schedule(phase2_step, args=(iterator,)) for _ in range(PHASE2)]
    coordinator.join()
    ran_by = [v.fetch() for v in first + second]
    if strategy.is_chief:
        servers = [c.call("Stats", {}, {})[1] for c in strategy.variables.clients]
        with open(out, "w") as f:
            json.dump({"ran_by": [list(map(int, r)) for r in ran_by], "servers": servers}, f)


if __name__ == "__main__":
    main()
