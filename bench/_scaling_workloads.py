"""The workloads ``bench_scaling.py`` times: one epoch of the seed CNN under ``fit`` with a given compression.

Two ways to run the two replicas: ``run_workers`` on 127.0.0.1 (``time_loopback``),
and two processes in two network namespaces joined by a veth pair whose both
ends are shaped by a tbf qdisc (``time_capped``: a slow link between two
"hosts"; needs root, ``ip`` and ``tc``). The data, the model and the warm-up
are ``_fit_workloads``'s, so the numbers compare with ``bench_fit.py``'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist

import stratagem
from _fit_workloads import (PER_REPLICA_BATCH_SIZE, WARMUP_STEPS, EpochTiming, _stdout_to_file, compiled_model,
                            loopback_interface, make_data)
from stratagem.testing import run_workers

COMPRESSIONS = {"none": None, "bf16": "bf16", "fp16": "fp16",
                # On a slow link only a low-rank gradient fits: plain steps for the warm-up only.
                "powersgd": stratagem.distribute.PowerSGD(rank=4, start_iter=2)}
RESULT_PREFIX = "SCALING_RESULT "


def fit_epoch(strategy: stratagem.distribute.Strategy, num_images: int) -> dict[str, float]:
    """One timed ``fit`` epoch with the global batch, after a warm-up fit of ``WARMUP_STEPS`` batches."""
    x, y = make_data(num_images)
    with strategy.scope():
        model = compiled_model("sgd")
    global_batch_size = PER_REPLICA_BATCH_SIZE * strategy.num_replicas_in_sync
    num_warmup = WARMUP_STEPS * global_batch_size
    model.fit(x[:num_warmup], y[:num_warmup], batch_size=global_batch_size, epochs=1, verbose=0)
    dist.barrier()  # every rank starts the clock together
    with _stdout_to_file():  # the default progress bar on, as users run it, printing to a file
        start = time.perf_counter()
        history = model.fit(x, y, batch_size=global_batch_size, epochs=1, verbose=1)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "loss": history.history["loss"][0], "num_threads": torch.get_num_threads()}


def _worker_fit(rank: int, world_size: int, num_images: int, timeout_s: float, compression: str) -> dict[str, float]:
    options = stratagem.distribute.CommunicationOptions(timeout_seconds=timeout_s, compression=COMPRESSIONS[compression])
    return fit_epoch(stratagem.distribute.MirroredStrategy(num_replicas=world_size, communication_options=options),
                     num_images)


def _slowest(results: list[dict[str, float]]) -> EpochTiming:
    slowest = max(results, key=lambda result: result["seconds"])
    return EpochTiming(slowest["seconds"], slowest["loss"], int(slowest["num_threads"]))


def time_loopback(compression: str, num_images: int, *, timeout_s: float) -> EpochTiming:
    """Two gloo processes x 1 thread on 127.0.0.1 (as ``bench_fit``'s DDP sides); the slowest rank's epoch."""
    env = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface()}
    return _slowest(run_workers(_worker_fit, world_size=2, args=(num_images, timeout_s / 2, compression),
                                timeout_s=timeout_s, env=env))


def capped_worker_main(compression: str, num_images: int, timeout_s: float) -> None:
    """A replica of the capped-link job (torchrun variables from ``time_capped``); prints its timing."""
    torch.set_num_threads(1)
    options = stratagem.distribute.CommunicationOptions(timeout_seconds=timeout_s, compression=COMPRESSIONS[compression])
    result = fit_epoch(stratagem.distribute.MultiWorkerMirroredStrategy(communication_options=options), num_images)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def capped_link_problem() -> str | None:
    """Why this machine cannot make the capped link (not root, no ``ip``/``tc``), or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    return f"needs the {' and '.join(missing)} tool(s)" if missing else None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


@contextlib.contextmanager
def capped_link(rate_mbit: float) -> Iterator[list[tuple[str, str]]]:
    """Two namespaces joined by a veth pair, each end shaped to ``rate_mbit`` (tbf); yields [(name, address)]."""
    tag = f"{os.getpid() % 10000}"
    subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
    names = [f"stgb{tag}a", f"stgb{tag}b"]
    made: list[str] = []
    try:
        hosts = []
        for name in names:
            _ip("netns", "add", name)
            made.append(name)
        _ip("link", "add", f"{names[0]}v", "type", "veth", "peer", "name", f"{names[1]}v")
        for index, name in enumerate(names):
            address = f"{subnet}.{index + 1}"
            _ip("link", "set", f"{name}v", "netns", name)
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", f"{name}v")
            _ip("-n", name, "link", "set", f"{name}v", "up")
            _ip("-n", name, "link", "set", "lo", "up")
            # Token bucket: the link's rate, a burst of one MTU-ish 32 kbit, packets wait at most 400 ms.
            subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", f"{name}v", "root", "tbf",
                            "rate", f"{rate_mbit}mbit", "burst", "32kbit", "latency", "400ms"],
                           check=True, capture_output=True, text=True, timeout=10)
            hosts.append((name, address))
        yield hosts
    finally:
        for name in made:  # deleting a namespace deletes its end of the veth pair, and so the pair
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10)


def time_capped(hosts: list[tuple[str, str]], compression: str, num_images: int, *, timeout_s: float) -> EpochTiming:
    """The two replicas in the two namespaces (MultiWorkerMirroredStrategy over the shaped veth)."""
    port = str(random.randint(20000, 60000))  # a fresh pair of namespaces: nothing else listens there
    script = str(Path(__file__).resolve().parent / "bench_scaling.py")
    secret = secrets.token_hex(16)
    procs = []
    for rank, (name, _) in enumerate(hosts):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": hosts[0][1], "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "STRATAGEM_JOB_SECRET": secret}
        argv = ["ip", "netns", "exec", name, "env", *[f"{k}={v}" for k, v in env.items()], sys.executable, script,
                "--capped-worker", compression, "--num-images", str(num_images), "--timeout", str(timeout_s)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        lines = [line for line in out.splitlines() if line.startswith(RESULT_PREFIX)]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"A capped-link replica failed (exit {proc.returncode}): {err[-2000:]}")
        results.append(json.loads(lines[-1][len(RESULT_PREFIX):]))
    return _slowest(results)
