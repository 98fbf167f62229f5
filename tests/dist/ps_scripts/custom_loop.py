"""TF's custom-loop shape on ParameterServerStrategy: schedule steps, join, fetch.

argv: OPTIMIZER STEPS OUT_JSON. The chief writes the trained values, the
fetched losses and the servers' counters to OUT_JSON. The batches are a fixed
list every worker reads from the start, so with one worker the steps see the
batches in the reference order. ``TEST_START_AFTER=PATH``: the chief, its
coordination service up, schedules no step before PATH exists;
``TEST_EXIT_AFTER=PATH``: having written OUT_JSON, it ends (and shuts its
service down) only once PATH exists (each wait at most 60 s).
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

BATCH = 16


def batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = classification_data(BATCH * steps, seed=3)
    return [(torch.from_numpy(x[i : i + BATCH]), torch.from_numpy(y[i : i + BATCH])) for i in range(0, len(x), BATCH)]


def make_optimizer(name: str, params: object) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=0.01) if name == "adam" else torch.optim.SGD(params, lr=0.1, momentum=0.9)  # type: ignore[arg-type]


def main() -> None:
    optimizer_name, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    staleness = os.environ.get("TEST_STALENESS")
    strategy = stratagem.distribute.ParameterServerStrategy(
        variable_partitioner=stratagem.distribute.FixedShardsPartitioner(2),
        staleness=int(staleness) if staleness else None)
    coordinator = stratagem.distribute.ClusterCoordinator(strategy)
    with strategy.scope():
        net = small_cnn()
        module = strategy.distribute_module(net)
        # The strategy's optimizer: its step() pushes the gradients to the servers.
        optimizer = strategy.distribute_optimizer(make_optimizer(optimizer_name, net.parameters()))

    def replica_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(module(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    fail_at = int(os.environ.get("TEST_FAIL_AT", "-1"))
    calls = [0]

    def train_step(iterator: object) -> torch.Tensor:
        calls[0] += 1
        if calls[0] == fail_at:
            raise ValueError(f"boom in call {fail_at}")
        x, y = next(iterator)  # type: ignore[call-overload]
        return strategy.run(replica_fn, args=(x, y))

    per_worker = iter(coordinator.create_per_worker_dataset(lambda: batches(steps)))
    if strategy.is_chief:
        _wait_for_file(os.environ.get("TEST_START_AFTER"))
    losses = [coordinator.schedule(train_step, args=(per_worker,)) for _ in range(steps)]
    coordinator.join()
    finished = coordinator.done()  # the chief's answer; a worker replaying gets the same one
    fetched = [float(v) for v in coordinator.fetch(losses)]
    if strategy.is_chief:
        strategy.pull_all()
        stats = [c.call("Stats", {}, {})[1] for c in strategy.variables.clients]
        with open(out, "w") as f:
            json.dump({"state": {k: v.tolist() for k, v in net.state_dict().items()}, "losses": fetched, "done": finished,
                       "servers": stats, "coordinator": coordinator.stats()}, f, default=str)
        _wait_for_file(os.environ.get("TEST_EXIT_AFTER"))


def _wait_for_file(path: str | None) -> None:
    deadline = time.monotonic() + 60
    while path and not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within 60 s")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
