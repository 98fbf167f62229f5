"""The workloads that ``bench_fit.py`` times, one epoch each, as plain functions.

Here: the synthetic Fashion-MNIST-shaped data, the seed CNN, the plain torch
training loop (also the per-rank loop of raw DDP), stratagem's ``fit``, and
the module-level ``_worker_*`` functions that ``run_workers`` spawns. Timing
policy (repeats, best-of, ratios), the report and the plot live in
``bench_fit.py``. This module imports no plotting library, so a spawned worker
pays only for torch and stratagem.

Spawned workers import this module by name: ``multiprocessing``'s spawn start
method copies the parent's ``sys.path`` (whose first entry is ``bench/``, the
script's directory) into each child before it unpickles the worker function.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import multiprocessing
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import stratagem
from stratagem.testing import run_workers

IMAGE_SIDE = 28
NUM_CLASSES = 10
PER_REPLICA_BATCH_SIZE = 64
WARMUP_STEPS = 5
DATA_SEED = 0
MODEL_SEED = 1
SHUFFLE_SEED = 2
LEARNING_RATE_SGD = 0.01
LEARNING_RATE_ADAM = 1e-3


@dataclass(frozen=True)
class EpochTiming:
    """One timed epoch: wall seconds (slowest rank), mean training loss, torch threads per process."""

    seconds: float
    loss: float
    num_threads: int


def make_data(num_images: int, seed: int = DATA_SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST-shaped images (float32 in [0, 1], 28x28, flattened to 784) and int64 labels 0..9."""
    rng = np.random.default_rng(seed)
    images = rng.random((num_images, IMAGE_SIDE, IMAGE_SIDE), dtype=np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=num_images, dtype=np.int64)
    return torch.from_numpy(images.reshape(num_images, IMAGE_SIDE * IMAGE_SIDE)), torch.from_numpy(labels)


def build_net(seed: int = MODEL_SEED) -> nn.Module:
    """The seed CNN of the issue; the same seed gives the same initial weights on every side."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Unflatten(1, (1, IMAGE_SIDE, IMAGE_SIDE)),
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(32 * 26 * 26, 128), nn.ReLU(), nn.Linear(128, NUM_CLASSES),
    )


def plain_optimizer(name: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """The baselines' optimizers: torch's defaults, as a plain torch user writes them."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=LEARNING_RATE_SGD)
    if name == "adam":
        return torch.optim.Adam(params, lr=LEARNING_RATE_ADAM)  # torch's default implementation
    if name == "adam_fused":
        return torch.optim.Adam(params, lr=LEARNING_RATE_ADAM, fused=True)
    raise ValueError(f"Unknown baseline optimizer. Expected 'sgd', 'adam' or 'adam_fused'. Received: name={name!r}")


def plain_epoch(net: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, *,
                global_batch_size: int, rank: int = 0, world_size: int = 1) -> torch.Tensor:
    """One epoch of the hand-written loop; returns the mean batch loss as a tensor.

    It does what ``fit`` does per step: batches cut from one seeded
    ``randperm``, this rank's contiguous share of each global batch,
    ``zero_grad(set_to_none=True)``, forward, mean loss, backward, step, and a
    running loss kept as a tensor (no ``.item()`` per step).
    """
    num_images = x.shape[0]
    order = torch.randperm(num_images, generator=torch.Generator().manual_seed(SHUFFLE_SEED))
    running_loss = torch.zeros(())
    num_steps = 0
    for start in range(0, num_images, global_batch_size):
        rows = order[start : start + global_batch_size]
        mine = rows[_share(len(rows), rank, world_size)]
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x[mine]), y[mine])
        loss.backward()  # under DDP, gradients are averaged across ranks here
        optimizer.step()
        running_loss += loss.detach()
        num_steps += 1
    return running_loss / num_steps


def _share(num_rows: int, rank: int, world_size: int) -> slice:
    """This rank's contiguous rows of a global batch, split as stratagem's ``replica_slice`` splits them."""
    base, extra = divmod(num_rows, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


def time_plain(x: torch.Tensor, y: torch.Tensor, *, optimizer: str) -> EpochTiming:
    """Times one epoch of the plain loop on a fresh model, after ``WARMUP_STEPS`` untimed steps."""
    net = build_net()
    opt = plain_optimizer(optimizer, list(net.parameters()))
    num_warmup = WARMUP_STEPS * PER_REPLICA_BATCH_SIZE
    plain_epoch(net, opt, x[:num_warmup], y[:num_warmup], global_batch_size=PER_REPLICA_BATCH_SIZE)
    start = time.perf_counter()
    loss = plain_epoch(net, opt, x, y, global_batch_size=PER_REPLICA_BATCH_SIZE).item()
    return EpochTiming(time.perf_counter() - start, loss, torch.get_num_threads())


def _measure_here(side: str, num_images: int, num_threads: int | None, optimizer: str, verbose: int,
                  keep_freed_memory: bool) -> EpochTiming:
    """Runs in a fresh process: builds the data and times one side (``"plain"`` or ``"fit"``)."""
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    if keep_freed_memory:
        from stratagem._process import keep_freed_memory as keep

        keep()  # what fit does to the host allocator, for a plain loop (information only)
    x, y = make_data(num_images)
    if side == "plain":
        return time_plain(x, y, optimizer=optimizer)
    return time_fit(x, y, optimizer=optimizer, verbose=verbose)


def time_in_fresh_process(side: str, num_images: int, *, optimizer: str, num_threads: int | None = None,
                          verbose: int = 0, keep_freed_memory: bool = False, timeout_s: float) -> EpochTiming:
    """Times one single-process side in a new interpreter, as a user's run would start.

    A fresh process per measurement: neither side inherits the other's
    process-wide state (fit's host-allocator setting, warmed heap, thread pools).
    """
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        future = pool.submit(_measure_here, side, num_images, num_threads, optimizer, verbose, keep_freed_memory)
        return future.result(timeout=timeout_s)


def compiled_model(optimizer: str) -> stratagem.Model:
    """A fresh stratagem model of the seed CNN, compiled as a Keras user would (in the current scope)."""
    model = stratagem.Model(build_net())
    model.compile(optimizer=optimizer, loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def time_fit(x: torch.Tensor, y: torch.Tensor, *, optimizer: str, verbose: int = 0) -> EpochTiming:
    """Times one ``fit`` epoch on a fresh model, after a warm-up ``fit`` of ``WARMUP_STEPS`` batches.

    ``verbose=1`` runs the default progress bar, printing to a file (as under a launcher or CI).
    """
    model = compiled_model(optimizer)
    num_warmup = WARMUP_STEPS * PER_REPLICA_BATCH_SIZE
    model.fit(x[:num_warmup], y[:num_warmup], batch_size=PER_REPLICA_BATCH_SIZE, epochs=1, verbose=0)
    with _stdout_to_file():
        start = time.perf_counter()
        history = model.fit(x, y, batch_size=PER_REPLICA_BATCH_SIZE, epochs=1, verbose=verbose)
        seconds = time.perf_counter() - start
    return EpochTiming(seconds, history.history["loss"][0], torch.get_num_threads())


@contextlib.contextmanager
def _stdout_to_file() -> Iterator[None]:
    """The progress bar's output goes to a file, not to the bench's own report."""
    with tempfile.TemporaryFile("w+") as sink, contextlib.redirect_stdout(sink):
        yield


def loopback_interface() -> str:
    """The loopback interface's name; both DDP sides pin gloo to it (stratagem does so by default)."""
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"


def _worker_raw_ddp(rank: int, world_size: int, num_images: int, timeout_s: float) -> dict[str, float]:
    """One rank of the hand-written DDP baseline: its own process group, DDP, SGD."""
    return run_in_gloo_group(_raw_ddp_epoch, rank, world_size, num_images, timeout_s=timeout_s)


def run_in_gloo_group(fn: Callable[..., Any], rank: int, world_size: int, *args: Any, timeout_s: float) -> Any:
    """``fn(rank, world_size, *args)`` in a gloo group of its own (``env://``), destroyed once ``fn`` has returned.

    The group must outlive every DDP module built on it, which ``fn``'s frame
    takes with it: a DDP reducer holding the group's last reference destroys
    the group with the GIL held (torch's ``Reducer`` binding does not release
    it, pytorch/pytorch#56297), and that destructor joins gloo's threads, one
    of which may be freeing a finished all-reduce's tensor, which takes the
    GIL: both wait forever (``make bench``'s raw DDP rank hung so in about
    half its runs). Dropped by ``destroy_process_group``, the group is
    destroyed with the GIL released.
    """
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        return fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def _raw_ddp_epoch(rank: int, world_size: int, num_images: int) -> dict[str, float]:
    x, y = make_data(num_images)
    # gradient_as_bucket_view: DDP's fastest documented setting (no copy of the reduced gradients)
    net = nn.parallel.DistributedDataParallel(build_net(), gradient_as_bucket_view=True)
    opt = plain_optimizer("sgd", list(net.parameters()))
    global_batch_size = PER_REPLICA_BATCH_SIZE * world_size
    num_warmup = WARMUP_STEPS * global_batch_size
    plain_epoch(net, opt, x[:num_warmup], y[:num_warmup], global_batch_size=global_batch_size,
                rank=rank, world_size=world_size)
    dist.barrier()  # every rank starts the clock together
    start = time.perf_counter()
    loss = plain_epoch(net, opt, x, y, global_batch_size=global_batch_size, rank=rank, world_size=world_size)
    dist.all_reduce(loss)  # fit ends its epoch with one all-reduce of the loss metric too
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "loss": loss.item() / world_size, "num_threads": torch.get_num_threads()}


def _worker_stratagem_fit_progbar(rank: int, world_size: int, num_images: int, timeout_s: float) -> dict[str, float]:
    """``_worker_stratagem_fit`` with the default progress bar on (the chief prints to a file)."""
    return _worker_stratagem_fit(rank, world_size, num_images, timeout_s, verbose=1)


def _worker_stratagem_fit(rank: int, world_size: int, num_images: int, timeout_s: float,
                          verbose: int = 0) -> dict[str, float]:
    """One replica of ``MirroredStrategy`` + ``fit`` with the global batch (RANK etc. come from run_workers)."""
    options = stratagem.distribute.CommunicationOptions(timeout_seconds=timeout_s)
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size, communication_options=options)
    x, y = make_data(num_images)
    with strategy.scope():
        model = compiled_model("sgd")
    global_batch_size = PER_REPLICA_BATCH_SIZE * world_size
    num_warmup = WARMUP_STEPS * global_batch_size
    model.fit(x[:num_warmup], y[:num_warmup], batch_size=global_batch_size, epochs=1, verbose=0)
    dist.barrier()  # every rank starts the clock together
    with _stdout_to_file():
        start = time.perf_counter()
        history = model.fit(x, y, batch_size=global_batch_size, epochs=1, verbose=verbose)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "loss": history.history["loss"][0], "num_threads": torch.get_num_threads()}


def time_ddp(worker_name: str, num_images: int, *, world_size: int = 2, timeout_s: float) -> EpochTiming:
    """Runs a DDP worker on ``world_size`` gloo processes x 1 thread; the epoch is the slowest rank's."""
    worker = {"raw_ddp": _worker_raw_ddp, "stratagem_fit": _worker_stratagem_fit,
              "stratagem_fit_progbar": _worker_stratagem_fit_progbar}[worker_name]
    # Same environment for both sides: one thread per process (stratagem keeps
    # OMP_NUM_THREADS when set, instead of splitting the cores itself), and gloo
    # on the loopback interface (stratagem's default for a 127.0.0.1 job).
    env = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface()}
    results = run_workers(worker, world_size=world_size, args=(num_images, timeout_s / 2), timeout_s=timeout_s, env=env)
    slowest = max(results, key=lambda result: result["seconds"])
    threads = {int(result["num_threads"]) for result in results}
    if len(threads) != 1:
        raise RuntimeError(f"DDP ranks ran with different thread counts. Received: num_threads={sorted(threads)}")
    return EpochTiming(slowest["seconds"], slowest["loss"], threads.pop())


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
