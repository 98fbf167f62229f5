"""Scaling efficiency of 2 processes x 1 thread with compressed gradients (``make bench``).

What is measured: one training epoch of the seed CNN (``_fit_workloads``: the
same data, model, batch of 64 per replica, SGD and warm-up as ``bench_fit.py``;
its gradient is about 11 MB a step).

Scaling efficiency of a 2-process job = its images/s (the slowest rank's
epoch) / (2 x the images/s of one process with one thread running the plain
torch loop on the same data). 1.0 would be perfect scaling; the denominator is
the same for every job, so the efficiencies compare directly.

Goals:
1. Loopback (two gloo processes on 127.0.0.1, one thread each):
   ``MirroredStrategy`` + ``fit`` with ``CommunicationOptions(compression="bf16")``
   reaches an efficiency >= 0.75. Shown next to it: the same job uncompressed,
   the hand-written DDP loop (``_fit_workloads._worker_raw_ddp``) and fp16, with
   bf16's speed-up over each.
2. A bandwidth-capped link: the two replicas in two network namespaces joined
   by a veth pair whose ends are shaped to ``--capped-mbit`` (20 Mbit/s) by a
   tbf qdisc (``MultiWorkerMirroredStrategy`` over it). The goal is the same
   (bf16, efficiency >= 0.75); uncompressed and ``PowerSGD(rank=4)`` are shown
   too. Needs root, ``ip`` and ``tc``: where the link cannot be made the report
   says why and this goal is not evaluated. A capped run is short
   (``--capped-num-images``) because an uncompressed step takes seconds there.

Each measurement is repeated ``--repeats`` times (order flipped every other
repeat) and the best counts. Writes ``scaling.json`` and ``scaling.png`` under
``--out-dir``, prints a PASS/FAIL line per goal and exits 1 if one fails.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _fit_workloads as fit_workloads
import _report
import _scaling_workloads as workloads
from _fit_workloads import EpochTiming

GOAL_EFFICIENCY = 0.75
Measurement = Callable[[int, float], EpochTiming]


def _loopback(compression: str) -> Measurement:
    return lambda n, t: workloads.time_loopback(compression, n, timeout_s=t)


LOOPBACK: dict[str, tuple[str, Measurement]] = {
    "single_1t": ("torch loop, 1 process x 1 thread", lambda n, t: fit_workloads.time_in_fresh_process(
        "plain", n, optimizer="sgd", num_threads=1, timeout_s=t)),
    "raw_ddp": ("torch DDP loop, 2x1", lambda n, t: fit_workloads.time_ddp("raw_ddp", n, timeout_s=t)),
    "fit_none": ("MirroredStrategy fit, 2x1, uncompressed", _loopback("none")),
    "fit_bf16": ("MirroredStrategy fit, 2x1, bf16", _loopback("bf16")),
    "fit_fp16": ("MirroredStrategy fit, 2x1, fp16", _loopback("fp16")),
}
CAPPED = {"none": "uncompressed", "bf16": "bf16", "powersgd": "PowerSGD(rank=4)"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-images", type=int, default=12_800, help="images per loopback epoch (default 12800)")
    parser.add_argument("--capped-num-images", type=int, default=1_280, help="images per capped-link epoch (default "
                        "1280, the least its DDP warm-up allows: an uncompressed step takes about 2 s there)")
    parser.add_argument("--capped-mbit", type=float, default=20.0, help="the capped link's rate in Mbit/s")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per side; the best counts (default 3)")
    parser.add_argument("--skip-capped", action="store_true", help="do not run the capped-link part")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where scaling.json and scaling.png go (default bench/results)")
    parser.add_argument("--capped-worker", choices=sorted(workloads.COMPRESSIONS), help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    minimum = 2 * fit_workloads.WARMUP_STEPS * fit_workloads.PER_REPLICA_BATCH_SIZE * 2
    for name in ("num_images", "capped_num_images"):
        if getattr(args, name) < minimum:
            parser.error(f"--{name.replace('_', '-')} must be at least {minimum} (twice the DDP warm-up). "
                         f"Received: {getattr(args, name)}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1. Received: --repeats={args.repeats}")
    return args


def _timed(label: str, num_images: int, measure: Callable[[], EpochTiming], repeat: str) -> EpochTiming:
    timing = measure()
    print(f"  [{repeat}] {label:<44} {num_images / timing.seconds:9.1f} images/s  ({timing.seconds:7.2f} s, "
          f"loss {timing.loss:.4f}, {timing.num_threads} threads/process)", flush=True)
    return timing


def run_loopback(num_images: int, *, repeats: int, timeout_s: float) -> dict[str, list[EpochTiming]]:
    order = list(LOOPBACK)
    timings: dict[str, list[EpochTiming]] = {name: [] for name in order}
    for repeat in range(repeats):
        for name in order if repeat % 2 == 0 else order[::-1]:
            label, measure = LOOPBACK[name]
            timings[name].append(_timed(label, num_images, lambda: measure(num_images, timeout_s),
                                        f"repeat {repeat + 1}/{repeats}"))
    return timings


def run_capped(num_images: int, *, rate_mbit: float, repeats: int, timeout_s: float) -> dict[str, list[EpochTiming]]:
    timings: dict[str, list[EpochTiming]] = {name: [] for name in CAPPED}
    with workloads.capped_link(rate_mbit) as hosts:
        for repeat in range(repeats):
            for name in CAPPED if repeat % 2 == 0 else list(CAPPED)[::-1]:
                timings[name].append(_timed(
                    f"capped {rate_mbit:g} Mbit/s, {CAPPED[name]}", num_images,
                    lambda: workloads.time_capped(hosts, name, num_images, timeout_s=timeout_s),
                    f"repeat {repeat + 1}/{repeats}"))
    return timings


def efficiency(job: EpochTiming, single: EpochTiming, num_images_job: int, num_images_single: int) -> float:
    """The job's images/s over twice one process's (see the module docstring)."""
    return (num_images_job / job.seconds) / (2 * num_images_single / single.seconds)


def summarize(loopback: dict[str, list[EpochTiming]], capped: dict[str, list[EpochTiming]] | None,
              args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    best = {name: min(runs, key=lambda timing: timing.seconds) for name, runs in loopback.items()}
    single, n = best["single_1t"], args.num_images
    jobs = {name: {"label": LOOPBACK[name][0], "images_per_s": round(n / best[name].seconds, 1),
                   "efficiency": round(efficiency(best[name], single, n, n), 4)}
            for name in ("raw_ddp", "fit_none", "fit_bf16", "fit_fp16")}
    configs: dict[str, dict[str, Any]] = {"loopback_bf16": {
        "title": "2x1 loopback, bf16", "efficiency": jobs["fit_bf16"]["efficiency"], "goal": GOAL_EFFICIENCY,
        "passed": jobs["fit_bf16"]["efficiency"] >= GOAL_EFFICIENCY,
        "single_process_images_per_s": round(n / single.seconds, 1), "jobs": jobs,
        "bf16_speedup_over_uncompressed": round(best["fit_none"].seconds / best["fit_bf16"].seconds, 4),
        "bf16_speedup_over_raw_ddp": round(best["raw_ddp"].seconds / best["fit_bf16"].seconds, 4),
    }}
    if capped is not None:
        best_capped = {name: min(runs, key=lambda timing: timing.seconds) for name, runs in capped.items()}
        m = args.capped_num_images
        capped_jobs = {name: {"label": f"capped {args.capped_mbit:g} Mbit/s, {label}",
                              "images_per_s": round(m / best_capped[name].seconds, 1),
                              "efficiency": round(efficiency(best_capped[name], single, m, n), 4)}
                       for name, label in CAPPED.items()}
        configs["capped_bf16"] = {
            "title": f"2x1 capped {args.capped_mbit:g} Mbit/s, bf16", "efficiency": capped_jobs["bf16"]["efficiency"],
            "goal": GOAL_EFFICIENCY, "passed": capped_jobs["bf16"]["efficiency"] >= GOAL_EFFICIENCY,
            "single_process_images_per_s": round(n / single.seconds, 1), "jobs": capped_jobs,
            "bf16_speedup_over_uncompressed": round(best_capped["none"].seconds / best_capped["bf16"].seconds, 4),
        }
    return configs


def print_report(configs: dict[str, dict[str, Any]], capped_problem: str | None) -> None:
    for config in configs.values():
        print(f"\n{config['title']}: one process x 1 thread {config['single_process_images_per_s']:.1f} images/s")
        for job in config["jobs"].values():
            print(f"  {job['label']:<46}{job['images_per_s']:>9.1f} images/s  efficiency {job['efficiency']:.3f}")
    print()
    for key, config in configs.items():
        verdict = "PASS" if config["passed"] else "FAIL"
        print(f"{verdict} {key}: scaling efficiency {config['efficiency']:.3f} (goal >= {config['goal']:.2f})")
    if capped_problem:
        print(f"NOT RUN capped link: {capped_problem}")


def plot(configs: dict[str, dict[str, Any]], path: Path) -> None:
    """One panel per link: every job's efficiency, the bf16 bar green or red against the dashed goal."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes_list = plt.subplots(1, len(configs), figsize=(6.5 * len(configs), 6), squeeze=False)
    for axes, (key, config) in zip(axes_list[0], configs.items()):
        names = list(config["jobs"])
        values = [config["jobs"][name]["efficiency"] for name in names]
        colors = [("tab:green" if config["passed"] else "tab:red") if name.endswith("bf16") else "tab:gray"
                  for name in names]
        axes.bar(range(len(names)), values, color=colors)
        axes.axhline(config["goal"], color="black", linestyle="--")
        for position, value in enumerate(values):
            axes.annotate(f"{value:.3f}", (position, value), ha="center", va="bottom")
        axes.set_xticks(range(len(names)), [config["jobs"][name]["label"] for name in names], fontsize=8,
                        rotation=30, ha="right")
        axes.set_ylim(0, 1.1)
        axes.set_ylabel("scaling efficiency (2 processes vs 2 x one process)")
        axes.set_title(config["title"])
    figure.suptitle("Scaling efficiency, seed CNN, 2 processes x 1 thread (dashed: goal)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.capped_worker:  # one replica of the capped-link job, started by time_capped
        workloads.capped_worker_main(args.capped_worker, args.num_images, args.timeout)
        return 0
    load_before = _report.load_average()
    timeout_s = 120.0 + 0.02 * args.num_images
    print(f"Timing {args.num_images} images x {args.repeats} repeat(s) on loopback (2 processes x 1 thread)", flush=True)
    loopback = run_loopback(args.num_images, repeats=args.repeats, timeout_s=timeout_s)
    capped_problem = "skipped (--skip-capped)" if args.skip_capped else workloads.capped_link_problem()
    capped = None
    if capped_problem is None:
        print(f"Timing {args.capped_num_images} images x {args.repeats} repeat(s) on a {args.capped_mbit:g} Mbit/s "
              "link between two network namespaces", flush=True)
        capped = run_capped(args.capped_num_images, rate_mbit=args.capped_mbit, repeats=args.repeats,
                            timeout_s=120.0 + 0.5 * args.capped_num_images)
    configs = summarize(loopback, capped, args)
    report = {
        "efficiency_definition": "images/s of the 2-process job (slowest rank's epoch) / (2 x images/s of one "
                                 "process with one thread running the plain torch loop on the same data)",
        "workload": {"model": "seed CNN (_fit_workloads.build_net)", "optimizer": "SGD(lr=0.01)",
                     "per_replica_batch_size": fit_workloads.PER_REPLICA_BATCH_SIZE,
                     "warmup_steps": fit_workloads.WARMUP_STEPS, "gradient_bytes_per_step_float32":
                         4 * sum(p.numel() for p in fit_workloads.build_net().parameters())},
        "environment": _report.environment(load_before, num_images=args.num_images, repeats=args.repeats,
                                           capped_num_images=args.capped_num_images, capped_mbit=args.capped_mbit),
        "capped_link": capped_problem or f"two network namespaces, veth pair, tbf {args.capped_mbit:g} Mbit/s each way",
        "configs": configs,
        "measurements": _report.measurements(
            {**loopback, **{f"capped_{k}": v for k, v in (capped or {}).items()}},
            {**{name: entry[0] for name, entry in LOOPBACK.items()},
             **{f"capped_{k}": f"capped link, {v}" for k, v in CAPPED.items()}}),
        "passed": all(config["passed"] for config in configs.values()),
    }
    _report.write(args.out_dir, "scaling", report, lambda path: plot(configs, path))
    print_report(configs, capped_problem)
    print(f"\nWrote {args.out_dir / 'scaling.json'} and {args.out_dir / 'scaling.png'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
