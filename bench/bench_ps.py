"""Parameter-server training against 2-replica ``MirroredStrategy``, and the cost of a Pull + Push (``make bench``).

What is measured:

1. Training throughput (samples/s) of the same model with the same step on
   both sides: ``zero_grad(set_to_none=True)``, forward, cross-entropy,
   backward, ``SGD(lr=0.01).step()``, a batch of 64 per worker or replica, on
   synthetic Fashion-MNIST-shaped data (float32 in [0, 1], 28x28 flattened to
   784, int64 labels; fixed seed, no download), each worker or replica
   cycling through its own 16 of 32 fixed batches. Two models: an MLP
   784-64-10 (50,890 parameters: communication per step is small, so the
   fixed cost of each call shows) and the seed CNN of ``bench_fit.py``
   (2,770,634 parameters, 11 MB of float32: the bytes moved per step show).

   - ``ParameterServerStrategy``: a chief, 2 workers and 1 ps, each a real
     process (``LocalPSCluster``), custom loop: the chief schedules
     ``train_step`` (``strategy.run(replica_fn, args=next(iterator))`` over
     ``create_per_worker_dataset``) with ``ClusterCoordinator.schedule``. It
     schedules 5 warm-up steps per worker and joins, starts the clock,
     schedules ``--steps`` steps per worker (2 x 150 by default; each goes to
     whichever worker is free, as asynchronous training does), joins,
     fetches the last step's loss, and stops the clock. For information, the
     CNN also runs with 2 ps and ``FixedShardsPartitioner(2)`` (every
     variable split over both servers).
   - ``MirroredStrategy(num_replicas=2)``: two gloo processes on loopback
     (``run_workers``), the same ``replica_fn`` through ``strategy.run`` on
     ``strategy.distribute_module(net)``, the loss scaled with
     ``compute_average_loss`` to the global batch of 128 (DDP sums the
     gradients). 5 warm-up steps, a barrier, ``--steps`` steps per replica,
     one all-reduce of the loss; the slowest replica's time counts.

   Both sides train ``2 x --steps`` batches of 64 in the timed region, so
   samples/s = 2 x steps x 64 / seconds. Every process of both sides (chief,
   workers, servers, replicas) runs with ``OMP_NUM_THREADS=1``; both start
   from the same initial weights (same seed). Reported: each side's best of
   ``--repeats`` runs (sides alternate, order flipped on every repeat, as in
   ``bench_fit.py``) and the ratio PS / Mirrored.

   No goal for PS / Mirrored: the issue sets none, and on a small host the parameter server is
   expected to be slower. Every PS step pulls all parameters from the
   servers and pushes all gradients back over gRPC, serialised and copied
   on both ends, with no overlap with compute, and the server applies SGD
   to the whole model per push; ``MirroredStrategy`` all-reduces the
   gradients once, overlapped with backward by DDP's buckets, and each
   replica steps locally. On one host of few cores the PS job also runs 4
   processes (5 with 2 ps) for 2 training processes, all competing for the
   same cores. Asynchronous parameter servers pay off on many machines, with
   slow or preemptible workers and large sparse variables, not here.

   Authentication (issue 13): every PS run above has a job secret, as under
   ``stratagem run``, so every call carries an HMAC-SHA256 of its bytes and
   every server checks it. Each model also runs the same PS job without a
   secret (``ps_*_unauthenticated``, next to the authenticated run in every
   repeat). Goal: authenticated samples/s at least 0.95x unauthenticated,
   best of the repeats on each side.

2. The cost of one round trip: one ``Pull`` and one ``Push`` (SGD, lr 0.01)
   of a single float32 variable of 1 KiB, 16 KiB, 256 KiB, 4 MiB, 16 MiB and
   64 MiB, from this process (``PSClient``) to one server in its own process
   (``python -m stratagem.distribute.ps.serve``, ``OMP_NUM_THREADS=1``) on
   loopback. After 10 untimed round trips of a 1-element variable (the
   connection and the server's threads start up), each size gets one
   untimed round trip, then ``--round-trips`` timed ones; reported: median
   and best milliseconds and the effective throughput, 2 x bytes / seconds
   (MB/s). This is about what a worker pays per step for a model of that
   size on one server. No goal: both the latency floor and the bandwidth
   depend on the machine.

Writes ``ps.json`` and ``ps.png`` under ``--out-dir`` and prints the tables.
Exits 1 when an authentication goal fails (or a measurement fails), 0 otherwise. The workloads (and the
PS job's script) are in ``_ps_workloads.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


import _ps_workloads as workloads
import _report
from _fit_workloads import cpu_count
from _ps_workloads import StepTiming


@dataclass(frozen=True)
class Comparison:
    """PS samples/s (``candidate``) over Mirrored samples/s (``baseline``) on one model; no threshold."""

    key: str
    title: str
    model: str
    baseline: str
    candidate: str
    info: tuple[str, ...] = ()


COMPARISONS = (
    Comparison("mlp", "MLP 784-64-10", "mlp", "mirrored_mlp", "ps_mlp", info=("ps_mlp_unauthenticated",)),
    Comparison("cnn", "seed CNN", "cnn", "mirrored_cnn", "ps_cnn", info=("ps_cnn_unauthenticated", "ps2_cnn")),
)
# Authenticated PS samples/s over the same job without a secret (issue 13's goal).
AUTHENTICATION_GOAL = 0.95
AUTHENTICATION = {"mlp": ("ps_mlp_unauthenticated", "ps_mlp"), "cnn": ("ps_cnn_unauthenticated", "ps_cnn")}

Measurement = Callable[[int, float], StepTiming]
MEASUREMENTS: dict[str, tuple[str, Measurement]] = {
    "mirrored_mlp": ("MirroredStrategy 2x1 thread, MLP",
                     lambda steps, t: workloads.time_mirrored("mlp", steps, timeout_s=t)),
    "ps_mlp": ("PS chief + 2 workers + 1 ps, MLP",
               lambda steps, t: workloads.time_parameter_server("mlp", steps, num_ps=1, timeout_s=t)),
    "ps_mlp_unauthenticated": ("PS as above, no job secret, MLP", lambda steps, t: workloads.time_parameter_server(
        "mlp", steps, num_ps=1, timeout_s=t, authenticated=False)),
    "mirrored_cnn": ("MirroredStrategy 2x1 thread, CNN",
                     lambda steps, t: workloads.time_mirrored("cnn", steps, timeout_s=t)),
    "ps_cnn": ("PS chief + 2 workers + 1 ps, CNN",
               lambda steps, t: workloads.time_parameter_server("cnn", steps, num_ps=1, timeout_s=t)),
    "ps_cnn_unauthenticated": ("PS as above, no job secret, CNN", lambda steps, t: workloads.time_parameter_server(
        "cnn", steps, num_ps=1, timeout_s=t, authenticated=False)),
    "ps2_cnn": ("PS chief + 2 workers + 2 ps (2 shards), CNN",
                lambda steps, t: workloads.time_parameter_server("cnn", steps, num_ps=2, timeout_s=t)),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150,
                        help="timed steps per worker or replica, batch 64 each (default 150)")
    parser.add_argument("--repeats", type=int, default=3, help="training runs per side; the best counts (default 3)")
    parser.add_argument("--round-trips", type=int, default=10,
                        help="timed Pull + Push round trips per variable size (default 10)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where ps.json and ps.png go (default bench/results)")
    args = parser.parse_args(argv)
    for name in ("steps", "repeats", "round_trips"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} must be at least 1. Received: {flag}={getattr(args, name)}")
    return args


def run_measurements(*, steps: int, repeats: int, timeout_s: float) -> dict[str, list[StepTiming]]:
    """Times every measurement ``repeats`` times, alternating the sides of each comparison."""
    timings: dict[str, list[StepTiming]] = {name: [] for name in MEASUREMENTS}
    for repeat in range(repeats):
        for comparison in COMPARISONS:
            group = (comparison.baseline, comparison.candidate, *comparison.info)
            # Flip the order on every other repeat, so neither side always runs
            # first (caches, frequency boost, a neighbour's load).
            for name in group if repeat % 2 == 0 else group[::-1]:
                timing = MEASUREMENTS[name][1](steps, timeout_s)
                timings[name].append(timing)
                print(f"  [repeat {repeat + 1}/{repeats}] {MEASUREMENTS[name][0]:<44} "
                      f"{timing.samples_per_s:9.1f} samples/s  ({timing.seconds:6.2f} s for {timing.steps} steps, "
                      f"loss {timing.loss:.4f}, {timing.num_threads} thread/process)", flush=True)
    return timings


def summarize(timings: dict[str, list[StepTiming]]) -> dict[str, dict[str, Any]]:
    """Per model: each side's best samples/s and the ratio PS / Mirrored (information, no goal)."""
    best = {name: min(runs, key=lambda timing: timing.seconds) for name, runs in timings.items()}
    configs: dict[str, dict[str, Any]] = {}
    for comparison in COMPARISONS:
        baseline, candidate = best[comparison.baseline], best[comparison.candidate]
        if baseline.num_threads != candidate.num_threads or baseline.steps != candidate.steps:
            raise RuntimeError(f"The sides of {comparison.key} ran with different thread or step counts, so the "
                               f"ratio would not be fair. Received: threads {baseline.num_threads} and "
                               f"{candidate.num_threads}, steps {baseline.steps} and {candidate.steps}")
        configs[comparison.key] = {
            "title": comparison.title, "model": comparison.model,
            "num_parameters": workloads.num_parameters(comparison.model),
            "num_threads_per_process": candidate.num_threads, "steps": candidate.steps,
            "baseline": comparison.baseline, "baseline_label": MEASUREMENTS[comparison.baseline][0],
            "baseline_samples_per_s": round(baseline.samples_per_s, 1),
            "candidate": comparison.candidate, "candidate_label": MEASUREMENTS[comparison.candidate][0],
            "candidate_samples_per_s": round(candidate.samples_per_s, 1),
            "ratio": round(candidate.samples_per_s / baseline.samples_per_s, 4), "goal": None,
            "info": {name: {"label": MEASUREMENTS[name][0], "samples_per_s": round(best[name].samples_per_s, 1),
                            "over_baseline": round(best[name].samples_per_s / baseline.samples_per_s, 4)}
                     for name in comparison.info},
        }
    return configs


def summarize_authentication(timings: dict[str, list[StepTiming]]) -> list[dict[str, Any]]:
    """Per model: best authenticated samples/s over best unauthenticated, against ``AUTHENTICATION_GOAL``."""
    goals = []
    for model, (baseline, candidate) in AUTHENTICATION.items():
        open_best = max(timing.samples_per_s for timing in timings[baseline])
        secret_best = max(timing.samples_per_s for timing in timings[candidate])
        ratio = secret_best / open_best
        goals.append({"key": f"authentication_{model}", "model": model, "baseline": baseline, "candidate": candidate,
                      "baseline_samples_per_s": round(open_best, 1), "candidate_samples_per_s": round(secret_best, 1),
                      "ratio": round(ratio, 4), "goal": AUTHENTICATION_GOAL, "passed": ratio >= AUTHENTICATION_GOAL})
    return goals


def environment(args: argparse.Namespace, load_before: tuple[float, ...]) -> dict[str, Any]:
    """What the numbers depend on: versions, threads, CPUs, load, date."""
    return _report.environment(load_before, steps_per_worker=args.steps, repeats=args.repeats,
                               round_trips_per_size=args.round_trips, omp_num_threads_per_process=1)


def workload_description() -> dict[str, Any]:
    return {
        "models": {"mlp": "Linear(784,64) ReLU Linear(64,10)",
                   "cnn": "Unflatten(1,28,28) Conv2d(1,32,3) ReLU Flatten Linear(21632,128) ReLU Linear(128,10)"},
        "data": f"synthetic float32 in [0,1], 784 features, int64 labels 0..9, {workloads.POOL_BATCHES} fixed "
                f"batches, numpy seed {workloads._fit_workloads.DATA_SEED}; worker/replica r cycles through batches "
                f"r, r+{workloads.NUM_WORKERS}, ...",
        "per_replica_batch_size": workloads.PER_REPLICA_BATCH_SIZE, "num_workers_or_replicas": workloads.NUM_WORKERS,
        "warmup_steps_per_worker": workloads.WARMUP_STEPS, "loss": "cross-entropy from logits",
        "optimizer": f"SGD(lr={workloads.LEARNING_RATE})",
        "round_trip": "one Pull + one Push (SGD) of one float32 variable, one server process, client in this process",
    }


def _size_label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def print_report(configs: dict[str, dict[str, Any]], round_trips: dict[str, dict[str, Any]]) -> None:
    print(f"\n{'model':<16}{'params':>11}{'threads':>8}{'Mirrored smp/s':>16}{'PS smp/s':>11}{'PS/Mirrored':>13}")
    for config in configs.values():
        print(f"{config['title']:<16}{config['num_parameters']:>11,}{config['num_threads_per_process']:>8}"
              f"{config['baseline_samples_per_s']:>16.1f}{config['candidate_samples_per_s']:>11.1f}"
              f"{config['ratio']:>12.3f}x")
        for info in config["info"].values():
            print(f"  info: {info['label']}: {info['samples_per_s']:.1f} samples/s "
                  f"({info['over_baseline']:.3f}x Mirrored)")
    print(f"\n{'Pull+Push of':<14}{'median ms':>11}{'best ms':>10}{'median MB/s':>13}{'best MB/s':>11}")
    for entry in round_trips.values():
        print(f"{_size_label(entry['bytes']):<14}{entry['median_ms']:>11.2f}{entry['best_ms']:>10.2f}"
              f"{entry['median_mb_per_s']:>13.1f}{entry['best_mb_per_s']:>11.1f}")
    print("\nNo goals for PS / Mirrored and the round-trip costs: information only (see the module docstring).")


def plot(configs: dict[str, dict[str, Any]], round_trips: dict[str, dict[str, Any]], path: Path) -> None:
    """Left: samples/s of each side per model (log scale). Right: round-trip time against size (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, (speed_axes, trip_axes) = plt.subplots(1, 2, figsize=(12, 4.5))
    _plot_speeds(speed_axes, configs)
    _plot_round_trips(trip_axes, round_trips)
    figure.suptitle("ParameterServerStrategy vs MirroredStrategy(2), and one Pull + Push (best of repeats)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _plot_speeds(axes: Any, configs: dict[str, dict[str, Any]]) -> None:
    values = _report.plot_side_by_side(
        axes, configs, rate="samples_per_s", labels=("MirroredStrategy, 2 replicas", "PS, 2 workers + 1 ps"),
        tick_labels=[f"{c['title']}\n({c['num_parameters']:,} params)" for c in configs.values()])
    for position, config in enumerate(configs.values()):
        axes.annotate(f"{config['ratio']:.2f}x", (position, config["candidate_samples_per_s"]),
                      ha="center", va="bottom", fontsize=8)
    axes.set_yscale("log")
    axes.set_ylim(min(values) / 4, max(values) * 4)
    axes.set_ylabel("samples/s (log)")
    axes.set_title("Training throughput (PS / Mirrored on top; no goal)")
    axes.legend(fontsize=7)


def _plot_round_trips(axes: Any, round_trips: dict[str, dict[str, Any]]) -> None:
    sizes = [entry["bytes"] for entry in round_trips.values()]
    axes.loglog(sizes, [entry["median_ms"] for entry in round_trips.values()], "o-", label="median")
    axes.loglog(sizes, [entry["best_ms"] for entry in round_trips.values()], "v", color="tab:green", label="best")
    for size, entry in zip(sizes, round_trips.values()):
        axes.annotate(f"{entry['median_mb_per_s']:.0f} MB/s", (size, entry["median_ms"]), textcoords="offset points",
                      xytext=(-4, 6), ha="right", fontsize=7)
    axes.set_xticks(sizes, [_size_label(size) for size in sizes], fontsize=8)
    axes.minorticks_off()
    times = [entry[key] for entry in round_trips.values() for key in ("best_ms", "median_ms")]
    axes.set_ylim(min(times) / 2, max(times) * 3)
    axes.set_xlabel("variable size (float32)")
    axes.set_ylabel("ms per Pull + Push (log)")
    axes.set_title("One round trip to one server process")
    axes.legend(fontsize=8)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = _report.load_average()
    timeout_s = 120.0 + 1.0 * args.steps  # a deadline against hangs, far above a normal run
    print(f"Timing {args.steps} steps per worker/replica x {args.repeats} repeat(s), "
          f"{workloads.NUM_WORKERS} workers/replicas, batch {workloads.PER_REPLICA_BATCH_SIZE} each, "
          f"1 thread per process, {cpu_count()} CPUs", flush=True)
    timings = run_measurements(steps=args.steps, repeats=args.repeats, timeout_s=timeout_s)
    configs = summarize(timings)
    print(f"Timing {args.round_trips} Pull + Push round trip(s) per size", flush=True)
    round_trips = workloads.summarize_round_trips(
        workloads.time_round_trips(workloads.ROUND_TRIP_SIZES, args.round_trips, timeout_s=60.0))
    report = {
        "workload": workload_description(), "environment": environment(args, load_before), "configs": configs,
        "round_trips": round_trips,
        "measurements": _report.measurements(timings, {name: entry[0] for name, entry in MEASUREMENTS.items()}),
        "goals": summarize_authentication(timings),
    }
    report["passed"] = all(goal["passed"] for goal in report["goals"])
    _report.write(args.out_dir, "ps", report, lambda path: plot(configs, round_trips, path))
    print_report(configs, round_trips)
    for goal in report["goals"]:
        print(f"{'PASS' if goal['passed'] else 'FAIL'} {goal['model']}: PS with a job secret "
              f"{goal['candidate_samples_per_s']:.1f} samples/s = {goal['ratio']:.3f}x without one "
              f"({goal['baseline_samples_per_s']:.1f}; goal >= {goal['goal']:.2f}x)")
    print(f"\nWrote {args.out_dir / 'ps.json'} and {args.out_dir / 'ps.png'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
