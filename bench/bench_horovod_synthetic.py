"""Horovod's ``pytorch_synthetic_benchmark.py``, unchanged, on ``stratagem.horovod`` vs plain DDP (``make bench``).

What is measured: Horovod's example script (``examples/pytorch`` in
horovod/horovod; not ours to vendor, so this takes its path) run with
``stratagem run -np 2`` and ``import horovod.torch as hvd`` resolved to
``stratagem.horovod`` (the shim of ``horovod_upstream.py``), against
``_synthetic_ddp.py``: the same torchvision model, batch, optimizer and
timing under torch's ``DistributedDataParallel``, launched the same way. Both
run 2 processes x 1 thread (``OMP_NUM_THREADS=1``) on 127.0.0.1 with gloo on
loopback. The figure is the script's own last line, ``Total img/sec on 2
CPU(s)``: rank 0's mean images/s over the timed iterations, times 2.

The defaults keep a run to a few minutes on 2 CPU cores: resnet18, 8 images
per rank, 3 warm-up steps, 3 timings of 5 steps (Horovod's defaults are
resnet50, 32, 10 and 10 x 10; pass them to measure that).

Horovod's script builds its model with ``norm_layer=hvd.SyncBatchNorm``:
batch-norm statistics over the global batch, one blocking all-gather per
layer forward and one all-reduce backward (resnet18: 20 layers, 40 waits a
step). torch's ``SyncBatchNorm`` refuses CPU tensors, and DDP refuses a model
holding one on CPU, so there are two DDP peers: ``ddp_sync``, the same model
(its batch norm computes over every rank's batch with stratagem.horovod's CPU
arithmetic; the gradient all-reduce is DDP's), which the goal is measured
against; and ``ddp``, torch's local ``BatchNorm2d``, a model that exchanges
no statistics at all, reported beside it.

torchvision's PyPI wheel is built against CUDA torch and its compiled ops do
not load on the CPU wheel, which makes ``import torchvision`` fail; the
models are plain Python, so both sides import ``torchvision.models`` through a
stand-in package that skips torchvision's ``__init__`` (no compiled op is
used by these models).

Goal: Horovod's script on stratagem >= 1.0x the same model's images/s under
DDP (best of ``--repeats`` each, sides in rotating order; min-max kept). DDP
runs with ``gradient_as_bucket_view=True``, ``broadcast_buffers=False`` and
``--ddp-bucket-cap-mb`` (default DDP's 25; 1, 5 and 100 MB read the same
within noise). Writes
``horovod_synthetic.json`` and ``.png`` under ``--out-dir``; exits 1 if the
goal is missed. Without a script path it says how to get one and skips.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import _report
import horovod_upstream
from _fit_workloads import loopback_interface

GOAL = 1.0
SCRIPT_ENV = "HOROVOD_SYNTHETIC_BENCHMARK"
_TOTAL = re.compile(r"Total img/sec on (\d+) CPU\(s\): ([0-9.]+) \+-([0-9.]+)")
_TORCHVISION_SHIM = """
    # torchvision's package without its __init__ (which loads CUDA-built ops): its modules, found on sys.path.
    import os
    import sys

    _shim = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    __path__ = [os.path.join(p, "torchvision") for p in sys.path if p and os.path.abspath(p) != _shim
                and os.path.isfile(os.path.join(p, "torchvision", "__init__.py"))][:1]
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("script", nargs="?", type=Path, default=os.environ.get(SCRIPT_ENV) or None,
                        help=f"Horovod's examples/pytorch/pytorch_synthetic_benchmark.py (default: ${SCRIPT_ENV})")
    parser.add_argument("--model", default="resnet18", help="a torchvision model taking norm_layer (default resnet18)")
    parser.add_argument("--batch-size", type=int, default=8, help="images per rank and step (default 8)")
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="runs per side; the best counts (default 3)")
    parser.add_argument("--ddp-bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size (default 25)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where horovod_synthetic.json and .png go (default bench/results)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1. Received: --repeats={args.repeats}")
    return args


def write_shim(folder: Path) -> None:
    """Horovod's module names for stratagem.horovod, plus the torchvision stand-in."""
    horovod_upstream.write_shim(folder)
    (folder / "torchvision").mkdir(exist_ok=True)
    (folder / "torchvision" / "__init__.py").write_text(textwrap.dedent(_TORCHVISION_SHIM).lstrip("\n"))


def run_side(script: Path, args: argparse.Namespace, shim: Path, peer_options: tuple[str, ...] = ()) -> float:
    """One run of ``script`` (with ``peer_options``) on 2 ranks; returns the total images/s that rank 0 printed."""
    stratagem = shutil.which("stratagem", path=str(Path(sys.executable).parent)) or "stratagem"
    options = ["--model", args.model, "--batch-size", str(args.batch_size), "--num-warmup-batches",
               str(args.num_warmup_batches), "--num-batches-per-iter", str(args.num_batches_per_iter),
               "--num-iters", str(args.num_iters)]
    if script.name == "pytorch_synthetic_benchmark.py":
        options.append("--no-cuda")
    options += peer_options
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=loopback_interface())
    done = subprocess.run([stratagem, "run", "-np", "2", str(script), *options], cwd=shim, env=env,
                          capture_output=True, text=True, timeout=args.timeout, check=False)
    found = _TOTAL.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{script.name} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return float(found.group(2))


def measure(args: argparse.Namespace, shim: Path) -> dict[str, list[float]]:
    peer = Path(__file__).resolve().parent / "_synthetic_ddp.py"
    bucket = ("--bucket-cap-mb", str(args.ddp_bucket_cap_mb))
    sides: dict[str, tuple[Path, tuple[str, ...]]] = {
        "horovod": (args.script.resolve(), ()), "ddp_sync": (peer, ("--norm", "sync", *bucket)),
        "ddp": (peer, ("--norm", "batch", *bucket))}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for repeat in range(args.repeats):
        for name in names[repeat % 3:] + names[:repeat % 3]:  # each side first once in three repeats
            script, options = sides[name]
            rates[name].append(run_side(script, args, shim, options))
            print(f"  [repeat {repeat + 1}/{args.repeats}] {name:<8} {rates[name][-1]:8.1f} img/s (2 ranks)",
                  flush=True)
    return rates


def _plot(path: Path, rates: dict[str, list[float]], ratios: dict[str, float], passed: bool, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sides = (("ddp", "tab:gray", "DDP, local\nBatchNorm2d"), ("ddp_sync", "tab:olive", "DDP, the same\nmodel (sync BN)"),
             ("horovod", "tab:blue", "Horovod's script\non stratagem.horovod"))
    for position, (name, color, _) in enumerate(sides):
        left.bar(position, max(rates[name]), width=0.6, color=color)
        left.vlines(position, min(rates[name]), max(rates[name]), colors="black")
    left.set_xticks(range(len(sides)), [label for _, _, label in sides])
    left.set_ylabel("images / s, 2 ranks (bar: best; line: min-max)")
    left.set_title(f"pytorch_synthetic_benchmark, {model}")
    _report.plot_ratios(right, {
        "same_model": {"ratio": ratios["ddp_sync"], "goal": GOAL, "passed": passed,
                       "title": "vs DDP, same model"},
        "local_bn": {"ratio": ratios["ddp"], "goal": GOAL, "passed": ratios["ddp"] >= GOAL,
                     "title": "vs DDP, local BN"}}, "images/s ratio")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.script is None or not args.script.is_file():
        print(f"SKIP horovod_synthetic: no Horovod script. Fetch examples/pytorch/pytorch_synthetic_benchmark.py "
              f"from horovod/horovod and pass its path (or set {SCRIPT_ENV}). Received: script={args.script}")
        return 0
    load_before = _report.load_average()
    shim = Path(tempfile.mkdtemp(prefix="hvd-synthetic-"))
    try:
        write_shim(shim)
        rates = measure(args, shim)
    finally:
        shutil.rmtree(shim, ignore_errors=True)
    ratios = {peer: max(rates["horovod"]) / max(rates[peer]) for peer in ("ddp_sync", "ddp")}
    passed = ratios["ddp_sync"] >= GOAL
    workload = {name: getattr(args, name) for name in
                ("model", "batch_size", "num_warmup_batches", "num_batches_per_iter", "num_iters", "ddp_bucket_cap_mb")}
    report: dict[str, Any] = {
        "environment": _report.environment(load_before, repeats=args.repeats, processes=2, threads_per_process=1),
        "workload": workload | {"script": str(args.script),
                                "ddp": "gradient_as_bucket_view=True, broadcast_buffers=False"},
        "images_per_s": {name: {"runs": runs, "best": max(runs), "min": min(runs)} for name, runs in rates.items()},
        "ratio": round(ratios["ddp_sync"], 4), "ratio_vs_local_batch_norm": round(ratios["ddp"], 4),
        "goal": GOAL, "passed": passed,
    }
    _report.write(args.out_dir, "horovod_synthetic", report,
                  lambda path: _plot(path, rates, ratios, passed, args.model))

    def side(name: str) -> str:
        return f"{max(rates[name]):.1f} img/s (min {min(rates[name]):.1f})"

    print(f"{'PASS' if passed else 'FAIL'} horovod_synthetic: Horovod's script on stratagem.horovod {side('horovod')} "
          f"vs DDP on the same model (sync batch norm) {side('ddp_sync')}: {ratios['ddp_sync']:.3f}x, goal >= "
          f"{GOAL:.1f}x; vs DDP with local BatchNorm2d (no statistics exchanged) {side('ddp')}: "
          f"{ratios['ddp']:.3f}x (report in {args.out_dir / 'horovod_synthetic.json'})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
