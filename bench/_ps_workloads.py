"""The workloads that ``bench_ps.py`` times, as plain functions, and the parameter-server training script.

Here: the two models (a small MLP and ``_fit_workloads``' seed CNN), the
synthetic batches each worker or replica cycles through, the training step
both sides run, the 2-process ``MirroredStrategy`` loop (spawned through
``run_workers``), the parameter-server job (started through
``LocalPSCluster``), and the Pull + Push round trip against one server.
Timing policy (repeats, best-of, ratios), the report and the plot live in
``bench_ps.py``. This module imports no plotting library, so a spawned or
started process pays only for torch and stratagem.

Run as a script, this file is the program of every non-ps task of the
parameter-server job (``LocalPSCluster`` starts it as chief and as each
worker; workers replay the chief's program): ``argv: MODEL STEPS_PER_WORKER
NUM_PS OUT_JSON``, and only the chief writes ``OUT_JSON``. Spawned workers
and started tasks import ``_fit_workloads`` by name: the script's directory
(``bench/``) is the first entry of ``sys.path`` in both.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import _fit_workloads
from _fit_workloads import PER_REPLICA_BATCH_SIZE, build_net, loopback_interface, make_data

NUM_WORKERS = 2  # parameter-server workers, and MirroredStrategy replicas
WARMUP_STEPS = 5  # per worker or replica, untimed
LEARNING_RATE = _fit_workloads.LEARNING_RATE_SGD
POOL_BATCHES = 32  # distinct synthetic batches; worker/replica r cycles through batches r, r + 2, ...
MLP_HIDDEN = 64
SCRIPT = Path(__file__).resolve()
CONNECTION_WARMUP_ROUND_TRIPS = 10
ROUND_TRIP_SIZES = (1 << 10, 16 << 10, 256 << 10, 4 << 20, 16 << 20, 64 << 20)  # bytes of float32


@dataclass(frozen=True)
class StepTiming:
    """One timed run: wall seconds of ``steps`` steps of ``PER_REPLICA_BATCH_SIZE`` samples, a loss, threads.

    ``detail``: for the parameter-server job, the steps each worker ran and
    the pushes each server applied (warm-up included).
    """

    seconds: float
    steps: int
    loss: float
    num_threads: int
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.steps * PER_REPLICA_BATCH_SIZE / self.seconds


def build_mlp(seed: int = _fit_workloads.MODEL_SEED) -> nn.Module:
    """784-64-10 with ReLU (50,890 parameters): small enough that communication, not compute, dominates."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(_fit_workloads.IMAGE_SIDE ** 2, MLP_HIDDEN), nn.ReLU(),
                         nn.Linear(MLP_HIDDEN, _fit_workloads.NUM_CLASSES))


MODELS: dict[str, Callable[[], nn.Module]] = {"mlp": build_mlp, "cnn": build_net}


def num_parameters(model: str) -> int:
    return sum(p.numel() for p in MODELS[model]().parameters())


def batches(worker: int, num_workers: int = NUM_WORKERS) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """An endless stream of this worker's batches of ``PER_REPLICA_BATCH_SIZE`` (same on both sides)."""
    x, y = make_data(POOL_BATCHES * PER_REPLICA_BATCH_SIZE)
    mine = [(x[i : i + PER_REPLICA_BATCH_SIZE], y[i : i + PER_REPLICA_BATCH_SIZE])
            for i in range(worker * PER_REPLICA_BATCH_SIZE, len(x), num_workers * PER_REPLICA_BATCH_SIZE)]
    return itertools.cycle(mine)


def make_replica_fn(module: nn.Module, optimizer: torch.optim.Optimizer,
                    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The step both sides run inside ``strategy.run``: zero_grad, forward, loss, backward, step."""

    def replica_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(module(x), y)
        loss.backward()  # MirroredStrategy: DDP sums the gradients here
        optimizer.step()  # ParameterServerStrategy: pushes the gradients to the servers here
        return loss.detach()

    return replica_fn


# ---- MirroredStrategy(num_replicas=2), one process per replica ------------------------------
def _worker_mirrored(rank: int, world_size: int, model: str, steps: int, timeout_s: float) -> dict[str, float]:
    """One replica: ``WARMUP_STEPS`` untimed steps, a barrier, ``steps`` timed steps, one all-reduce of the loss."""
    import torch.distributed as dist

    import stratagem

    options = stratagem.distribute.CommunicationOptions(timeout_seconds=timeout_s)
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size, communication_options=options)
    global_batch_size = PER_REPLICA_BATCH_SIZE * world_size
    with strategy.scope():
        net = MODELS[model]()
        module = strategy.distribute_module(net)
        optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    step = make_replica_fn(module, optimizer, lambda logits, y: stratagem.nn.compute_average_loss(
        F.cross_entropy(logits, y, reduction="none"), global_batch_size=global_batch_size))
    data = batches(strategy.replica_id_in_sync_group, world_size)
    for _ in range(WARMUP_STEPS):
        strategy.run(step, args=next(data))
    dist.barrier()  # every replica starts the clock together
    start = time.perf_counter()
    loss = torch.zeros(())
    for _ in range(steps):
        loss = strategy.run(step, args=next(data))
    total = strategy.reduce("sum", loss)  # the PS side ends by fetching a loss from a worker
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "loss": float(total), "num_threads": torch.get_num_threads()}


def time_mirrored(model: str, steps: int, *, timeout_s: float) -> StepTiming:
    """``steps`` steps on each of 2 replicas x 1 thread (gloo, loopback); the slowest replica's time counts."""
    from stratagem.testing import run_workers

    env = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface()}
    results = run_workers(_worker_mirrored, world_size=NUM_WORKERS, args=(model, steps, timeout_s / 2),
                          timeout_s=timeout_s, env=env)
    slowest = max(results, key=lambda result: result["seconds"])
    return StepTiming(slowest["seconds"], steps * NUM_WORKERS, slowest["loss"], int(slowest["num_threads"]))


# ---- ParameterServerStrategy: chief + 2 workers + servers, real processes --------------------
def time_parameter_server(model: str, steps: int, *, num_ps: int, timeout_s: float,
                          authenticated: bool = True) -> StepTiming:
    """Runs this file as chief and ``NUM_WORKERS`` workers of a job with ``num_ps`` servers (1 thread each).

    ``authenticated``: the job has a secret (as under ``stratagem run``) and
    every call carries its proof; otherwise none (a loopback job without one).
    """
    from stratagem.distribute import job_secret
    from stratagem.testing.ps_cluster import LocalPSCluster

    with tempfile.TemporaryDirectory(prefix="stratagem_bench_ps_") as folder:
        log_dir, out = Path(folder), Path(folder) / "chief.json"
        env = {"OMP_NUM_THREADS": "1", "STRATAGEM_TIMEOUT_S": str(int(timeout_s)),
               job_secret.SECRET_ENV: job_secret.generate() if authenticated else ""}
        with LocalPSCluster(SCRIPT, num_workers=NUM_WORKERS, num_ps=num_ps, log_dir=log_dir, env=env,
                            args=(model, str(steps), str(num_ps), str(out))) as cluster:
            status = cluster.wait("chief", 0, timeout_s)
            if status != 0:
                raise RuntimeError(f"The parameter-server chief exited with status {status}.\n{cluster.logs()}")
            result = json.loads(out.read_text())
    return StepTiming(result["seconds"], result["steps"], result["loss"], int(result["num_threads"]),
                      {key: result[key] for key in ("closures_per_worker", "pushes_applied")})


def ps_main(argv: list[str]) -> None:
    """The program of the chief and of every worker (workers replay it and run the scheduled steps)."""
    from stratagem.distribute import FixedShardsPartitioner
    from stratagem.distribute.coordinator import ClusterCoordinator
    from stratagem.distribute.parameter_server import ParameterServerStrategy

    model, steps_per_worker, num_ps, out = argv[0], int(argv[1]), int(argv[2]), argv[3]
    partitioner = FixedShardsPartitioner(num_ps) if num_ps > 1 else None
    strategy = ParameterServerStrategy(variable_partitioner=partitioner)
    coordinator = ClusterCoordinator(strategy)
    with strategy.scope():
        net = MODELS[model]()
        module = strategy.distribute_module(net)
        optimizer = strategy.distribute_optimizer(torch.optim.SGD(net.parameters(), lr=LEARNING_RATE))
    step = make_replica_fn(module, optimizer, F.cross_entropy)

    def train_step(iterator: Any) -> torch.Tensor:
        return strategy.run(step, args=next(iterator))

    per_worker = iter(coordinator.create_per_worker_dataset(
        lambda context: batches(context.input_pipeline_id, context.num_input_pipelines)))
    for _ in range(WARMUP_STEPS * strategy.num_workers):
        coordinator.schedule(train_step, args=(per_worker,))
    coordinator.join()
    start = time.perf_counter()
    num_steps = steps_per_worker * strategy.num_workers
    losses = [coordinator.schedule(train_step, args=(per_worker,)) for _ in range(num_steps)]
    coordinator.join()
    last_loss = float(losses[-1].fetch())
    seconds = time.perf_counter() - start
    if strategy.is_chief:
        stats = coordinator.stats()
        servers = [client.call("Stats", {}, {})[1] for client in strategy.variables.clients]
        Path(out).write_text(json.dumps({
            "seconds": seconds, "steps": len(losses), "loss": last_loss, "num_threads": torch.get_num_threads(),
            "closures_per_worker": {str(k): v["closures_run"] for k, v in stats["workers"].items()},
            "pushes_applied": [server["pushes_applied"] for server in servers],
        }))


# ---- one Pull + one Push against one server in its own process -------------------------------
def time_round_trips(sizes: tuple[int, ...], rounds: int, *, timeout_s: float) -> dict[int, list[float]]:
    """Seconds of ``rounds`` Pull + Push (SGD) round trips of one float32 variable of each size in bytes.

    The server runs ``python -m stratagem.distribute.ps.serve`` (one thread);
    the client is this process. The connection first makes ``CONNECTION_WARMUP_ROUND_TRIPS``
    untimed round trips of a 1-element variable, and each size one untimed round trip. Every
    call carries its proof of a job secret, as in a job started by ``stratagem run``.
    """
    from stratagem.distribute import job_secret
    from stratagem.distribute.ps.auth import Credentials
    from stratagem.distribute.ps.client import PSClient
    from stratagem.launcher.environment import ps_cluster_configs

    secret = job_secret.generate()
    env = {**os.environ, "TF_CONFIG": ps_cluster_configs(1, 1)[("ps", 0)], "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[1]), os.environ.get("PYTHONPATH", "")]),
           job_secret.SECRET_ENV: secret}
    address = json.loads(env["TF_CONFIG"])["cluster"]["ps"][0]
    server = subprocess.Popen([sys.executable, "-m", "stratagem.distribute.ps.serve"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = PSClient(address, timeout_s=timeout_s, credentials=Credentials.from_secret(secret.encode()))
    sgd = {"optimizer": {"class": "SGD", "hyper": {"lr": LEARNING_RATE}}}
    seconds: dict[int, list[float]] = {}
    try:
        client.call("Create", {"w": torch.zeros(1)}, {})
        for _ in range(CONNECTION_WARMUP_ROUND_TRIPS):  # the connection and the server's threads start up
            client.call("Pull", {}, {"names": ["w"]})
            client.call("Push", {"w": torch.zeros(1)}, sgd)
        for size in sizes:
            value = torch.zeros(size // 4, dtype=torch.float32)
            gradient = torch.full_like(value, 1e-3)
            client.call("Create", {"w": value}, {})
            runs = []
            for attempt in range(rounds + 1):
                start = time.perf_counter()
                client.call("Pull", {}, {"names": ["w"]})
                client.call("Push", {"w": gradient}, sgd)
                if attempt:  # the first is the untimed warm-up
                    runs.append(time.perf_counter() - start)
            seconds[size] = runs
    finally:
        client.close()
        server.terminate()
        try:
            _, errors = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, errors = server.communicate()
        if server.returncode not in (0, -15):
            raise RuntimeError(f"The parameter server exited with status {server.returncode}: "
                               f"{errors.decode()[-2000:]}")
    return seconds


def summarize_round_trips(seconds: dict[int, list[float]]) -> dict[str, dict[str, float]]:
    """Per size: median and best milliseconds, and the effective MB/s (2 x bytes over the time)."""
    summary = {}
    for size, runs in seconds.items():
        median, best = statistics.median(runs), min(runs)
        summary[str(size)] = {"bytes": size, "rounds": len(runs), "median_ms": round(median * 1e3, 3),
                              "best_ms": round(best * 1e3, 3), "median_mb_per_s": round(2 * size / median / 1e6, 1),
                              "best_mb_per_s": round(2 * size / best / 1e6, 1)}
    return summary


if __name__ == "__main__":
    ps_main(sys.argv[1:])
