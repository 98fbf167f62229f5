"""Throughput of stratagem's ``fit`` against the plain PyTorch code it replaces (``make bench``).

What is measured: one training epoch of the seed CNN (conv 32x3x3, dense 128,
dense 10; cross-entropy from logits) on 12,800 synthetic Fashion-MNIST-shaped
images (float32 in [0, 1], 28x28, int64 labels; fixed seed, no download), with
a per-replica batch of 64. ``--num-images 60000`` times a whole Fashion-MNIST
epoch; 12,800 (200 steps) keeps the 13 sides x 3 repeats, each in a fresh
process, to about 5 minutes. Each goal is a ratio "stratagem images/s over plain
torch images/s", all >= 1.0x:

1. One process, SGD(lr=0.01), torch's default thread count and 1 thread, with
   ``verbose=0`` and with the default progress bar (``verbose=1`` printing to
   a file): a hand-written loop against ``Model.compile(optimizer="sgd", ...)``
   + ``fit``.
2. The same with Adam(lr=1e-3): the loop uses ``torch.optim.Adam`` as most
   torch code does (torch's default implementation), fit uses ``"adam"``, for
   which stratagem picks the fused CPU kernel. A loop with
   ``Adam(fused=True)`` is timed too, for information.
3. Two gloo processes on 127.0.0.1 with one thread each, SGD, with and
   without the progress bar: a hand-written ``DistributedDataParallel`` loop
   against ``MirroredStrategy(num_replicas=2)`` + ``fit`` with the global
   batch of 128. Throughput is the images of the epoch over the slowest
   rank's epoch time.

``fit`` sets glibc's malloc to keep freed blocks (``stratagem._process.
keep_freed_memory``); a plain loop started with the same setting is timed
for information, so the report shows how much of the ratio that is.

Why each comparison is fair: both sides train the same initial weights
(same seed) on the same tensors with the same thread count, and the plain
loop does the work fit does per epoch: a seeded ``randperm``, batches cut by
indexing, ``zero_grad(set_to_none=True)``, forward, mean loss, backward, step,
and the running loss kept as a tensor (no ``.item()`` per step). Only the
shuffle seed differs (fit draws its own), which changes the order of the
examples, not the work. Every measurement runs in a fresh process, as a
user's run starts, so no side inherits another's process-wide state. On both
DDP sides each rank takes its contiguous half of every global batch of a
permutation the ranks share, starts the clock after a barrier and ends the
epoch with one all-reduce of the loss; both run with ``OMP_NUM_THREADS=1``
and gloo on the loopback interface. Each side gets the same untimed warm-up
(5 steps; for fit, a ``fit`` on 5 batches) on a fresh model. Whatever else
fit does (callbacks, the loss metric, its global-batch loss scaling, its
gradient-sum hook) is its own cost and is timed. On a small, busy machine
noise is the enemy: the sides alternate (order flipped on every repeat),
every measurement is repeated ``--repeats`` times, and each side keeps its
best.

Writes ``fit.json`` and ``fit.png`` under ``--out-dir``, prints a table and a
PASS/FAIL line per goal, and exits 1 if a goal fails. The workloads themselves
are in ``_fit_workloads.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import _fit_workloads as workloads
import _report
from _fit_workloads import EpochTiming


@dataclass(frozen=True)
class Goal:
    """One ratio with its threshold: ``candidate`` images/s over ``baseline`` images/s."""

    key: str
    title: str
    baseline: str
    candidate: str
    threshold: float
    info: tuple[str, ...] = ()


GOALS = (
    Goal("single_sgd", "1 process, SGD", "sgd_plain", "sgd_fit", 1.0, info=("sgd_plain_kept",)),
    # What users run: the default progress bar on, printing to a file or pipe.
    Goal("single_sgd_progbar", "1 process, SGD, progress bar", "sgd_plain", "sgd_fit_progbar", 1.0),
    Goal("single_sgd_1t", "1 process x 1 thread, SGD", "sgd_plain_1t", "sgd_fit_1t", 1.0),
    Goal("single_sgd_1t_progbar", "1 process x 1 thread, SGD, progress bar", "sgd_plain_1t", "sgd_fit_1t_progbar", 1.0),
    Goal("single_adam", "1 process, Adam", "adam_plain", "adam_fit", 1.0, info=("adam_plain_fused",)),
    Goal("ddp_sgd", "2 processes x 1 thread, SGD", "ddp_raw", "ddp_fit", 1.0),
    Goal("ddp_sgd_progbar", "2 processes x 1 thread, SGD, progress bar", "ddp_raw", "ddp_fit_progbar", 1.0),
)


def _single(side: str, optimizer: str = "sgd", *, threads: int | None = None, verbose: int = 0,
            keep_freed_memory: bool = False) -> Measurement:
    """A single-process side, timed in a fresh interpreter."""
    return lambda n, t: workloads.time_in_fresh_process(side, n, optimizer=optimizer, num_threads=threads,
                                                        verbose=verbose, keep_freed_memory=keep_freed_memory,
                                                        timeout_s=t)


def _ddp(worker: str) -> Measurement:
    return lambda n, t: workloads.time_ddp(worker, n, timeout_s=t)


Measurement = Callable[[int, float], EpochTiming]
MEASUREMENTS: dict[str, tuple[str, Measurement]] = {
    "sgd_plain": ("torch loop, SGD", _single("plain")),
    "sgd_fit": ("stratagem fit, sgd", _single("fit")),
    "sgd_plain_kept": ("torch loop, SGD, malloc set as fit sets it", _single("plain", keep_freed_memory=True)),
    "sgd_plain_1t": ("torch loop, SGD, 1 thread", _single("plain", threads=1)),
    "sgd_fit_1t": ("stratagem fit, sgd, 1 thread", _single("fit", threads=1)),
    "adam_plain": ("torch loop, Adam (default impl.)", _single("plain", "adam")),
    "adam_fit": ("stratagem fit, adam", _single("fit", "adam")),
    "adam_plain_fused": ("torch loop, Adam(fused=True)", _single("plain", "adam_fused")),
    "ddp_raw": ("torch DDP loop, 2x1 thread", _ddp("raw_ddp")),
    "ddp_fit": ("MirroredStrategy fit, 2x1 thread", _ddp("stratagem_fit")),
    "sgd_fit_progbar": ("stratagem fit, sgd, verbose=1", _single("fit", verbose=1)),
    "sgd_fit_1t_progbar": ("stratagem fit, sgd, 1 thread, verbose=1", _single("fit", threads=1, verbose=1)),
    "ddp_fit_progbar": ("MirroredStrategy fit, 2x1, verbose=1", _ddp("stratagem_fit_progbar")),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-images", type=int, default=12_800, help="images per epoch (default 12800)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per side; the best counts (default 3)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where fit.json and fit.png go (default bench/results)")
    parser.add_argument("--goals", default=",".join(goal.key for goal in GOALS),
                        help="comma-separated goal keys to measure (default: all)")
    args = parser.parse_args(argv)
    known = {goal.key for goal in GOALS}
    args.goals = [key.strip() for key in args.goals.split(",") if key.strip()]
    unknown = sorted(set(args.goals) - known)
    if unknown or not args.goals:
        parser.error(f"--goals takes keys from {sorted(known)}. Received: --goals={','.join(args.goals)}")
    num_ddp_warmup_images = workloads.WARMUP_STEPS * workloads.PER_REPLICA_BATCH_SIZE * 2
    if args.num_images < 2 * num_ddp_warmup_images:
        parser.error(f"--num-images must be at least {2 * num_ddp_warmup_images} (twice the DDP warm-up). "
                     f"Received: --num-images={args.num_images}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1. Received: --repeats={args.repeats}")
    return args


def run_measurements(num_images: int, *, goals: tuple[Goal, ...], repeats: int,
                     timeout_s: float) -> dict[str, list[EpochTiming]]:
    """Times every measurement once per repeat; a baseline shared by two goals runs once."""
    order = list(dict.fromkeys(name for goal in goals for name in (goal.baseline, goal.candidate, *goal.info)))
    timings: dict[str, list[EpochTiming]] = {name: [] for name in order}
    for repeat in range(repeats):
        # Each goal's sides run next to each other; the order flips on every other
        # repeat, so neither side always runs first (caches, a neighbour's load).
        for name in order if repeat % 2 == 0 else order[::-1]:
            timing = MEASUREMENTS[name][1](num_images, timeout_s)
            timings[name].append(timing)
            print(f"  [repeat {repeat + 1}/{repeats}] {MEASUREMENTS[name][0]:<34} "
                  f"{num_images / timing.seconds:9.1f} images/s  ({timing.seconds:6.2f} s, "
                  f"loss {timing.loss:.4f}, {timing.num_threads} threads/process)", flush=True)
    return timings


def summarize(timings: dict[str, list[EpochTiming]], num_images: int,
              goals: tuple[Goal, ...]) -> dict[str, dict[str, Any]]:
    """Per goal: each side's best images/s, the ratio, the threshold and the verdict."""
    best = {name: min(runs, key=lambda timing: timing.seconds) for name, runs in timings.items()}
    configs: dict[str, dict[str, Any]] = {}
    for goal in goals:
        baseline, candidate = best[goal.baseline], best[goal.candidate]
        if baseline.num_threads != candidate.num_threads:
            raise RuntimeError(f"The sides of {goal.key} ran with different thread counts, so the ratio would "
                               f"not be fair. Received: {baseline.num_threads} and {candidate.num_threads}")
        ratio = baseline.seconds / candidate.seconds
        configs[goal.key] = {
            "title": goal.title,
            "num_threads_per_process": candidate.num_threads,
            "baseline": goal.baseline, "baseline_label": MEASUREMENTS[goal.baseline][0],
            "baseline_images_per_s": round(num_images / baseline.seconds, 1),
            "candidate": goal.candidate, "candidate_label": MEASUREMENTS[goal.candidate][0],
            "candidate_images_per_s": round(num_images / candidate.seconds, 1),
            "ratio": round(ratio, 4), "goal": goal.threshold, "passed": ratio >= goal.threshold,
            "info": {name: {"label": MEASUREMENTS[name][0], "images_per_s": round(num_images / best[name].seconds, 1),
                            "candidate_over_this": round(best[name].seconds / candidate.seconds, 4)}
                     for name in goal.info},
        }
    return configs


def environment(args: argparse.Namespace, load_before: tuple[float, ...]) -> dict[str, Any]:
    """What the numbers depend on: versions, threads, CPUs, load, date."""
    return _report.environment(load_before, num_images=args.num_images, repeats=args.repeats)


def workload_description() -> dict[str, Any]:
    return {
        "model": "Unflatten(1,28,28) Conv2d(1,32,3) ReLU Flatten Linear(21632,128) ReLU Linear(128,10)",
        "data": "synthetic float32 in [0,1], 28x28 flattened to 784, int64 labels 0..9, numpy seed "
                f"{workloads.DATA_SEED}",
        "per_replica_batch_size": workloads.PER_REPLICA_BATCH_SIZE, "warmup_steps": workloads.WARMUP_STEPS,
        "loss": "cross-entropy from logits", "epochs_per_measurement": 1,
    }


def print_report(configs: dict[str, dict[str, Any]]) -> None:
    print(f"\n{'config':<30}{'threads':>8}{'torch img/s':>13}{'fit img/s':>11}{'ratio':>8}{'goal':>9}")
    for config in configs.values():
        print(f"{config['title']:<30}{config['num_threads_per_process']:>8}{config['baseline_images_per_s']:>13.1f}"
              f"{config['candidate_images_per_s']:>11.1f}{config['ratio']:>7.3f}x{config['goal']:>7.2f}x")
        for info in config["info"].values():
            print(f"  info: {info['label']}: {info['images_per_s']:.1f} images/s "
                  f"(fit / this = {info['candidate_over_this']:.3f}x, no goal)")
    print()
    for key, config in configs.items():
        verdict = "PASS" if config["passed"] else "FAIL"
        print(f"{verdict} {key}: {config['candidate_label']} at {config['ratio']:.3f}x "
              f"{config['baseline_label']} (goal >= {config['goal']:.2f}x)")


def plot(configs: dict[str, dict[str, Any]], path: Path) -> None:
    """Left: the three ratios with their goal lines. Right: images/s of every side."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, (ratio_axes, speed_axes) = plt.subplots(1, 2, figsize=(13, 6))
    _report.plot_ratios(ratio_axes, configs, "fit images/s / torch images/s")
    _plot_speeds(speed_axes, configs)
    figure.suptitle("stratagem fit vs plain PyTorch, one epoch of the seed CNN (best of repeats)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)



def _plot_speeds(axes: Any, configs: dict[str, dict[str, Any]]) -> None:
    _report.plot_side_by_side(axes, configs, rate="images_per_s", labels=("plain torch", "stratagem fit"),
                              tick_labels=[config["title"] for config in configs.values()])
    axes.set_ylabel("images/s")
    axes.set_title("Throughput")
    axes.legend(fontsize=8)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = _report.load_average()
    timeout_s = 120.0 + 0.02 * args.num_images  # a deadline against hangs, far above a normal epoch
    print(f"Timing {args.num_images} images x {args.repeats} repeat(s), "
          f"{torch.get_num_threads()} torch threads in this process", flush=True)
    goals = tuple(goal for goal in GOALS if goal.key in args.goals)
    timings = run_measurements(args.num_images, goals=goals, repeats=args.repeats, timeout_s=timeout_s)
    configs = summarize(timings, args.num_images, goals)
    report = {
        "workload": workload_description(), "environment": environment(args, load_before), "configs": configs,
        "measurements": _report.measurements(timings, {name: entry[0] for name, entry in MEASUREMENTS.items()}),
        "passed": all(config["passed"] for config in configs.values()),
    }
    _report.write(args.out_dir, "fit", report, lambda path: plot(configs, path))
    print_report(configs)
    print(f"\nWrote {args.out_dir / 'fit.json'} and {args.out_dir / 'fit.png'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
