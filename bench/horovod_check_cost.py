"""What the cross-rank check costs on ``hvd.DistributedOptimizer``'s path, on 2 ranks.

Before a step's gradients move, ``DistributedOptimizer`` checks them with the
other ranks once (count and checksum of shapes and dtypes, one all-gather of a
125-integer record), so mismatched models raise ``HorovodInternalError`` on
every rank instead of aborting inside gloo. This measures that check alone
(``_check_step``, called back to back, median of ``--calls``) and a whole
training step of the same model (forward, backward, all-reduce, SGD step;
median of ``--steps``), on a torchvision model (default resnet50: 161
gradients, the most of Horovod's example models) at ``--batch-size`` images
per rank, 2 ranks x 1 thread on 127.0.0.1 with gloo. Prints one line and
writes ``horovod_check_cost.json`` and ``.png`` under ``--out-dir``.

Usage:
    python bench/horovod_check_cost.py [--model resnet50] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _report
import bench_horovod_synthetic
from _fit_workloads import loopback_interface


def worker(args: argparse.Namespace) -> None:
    import torch
    import torchvision.models

    import stratagem.horovod as hvd

    hvd.init()
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    images, labels = torch.randn(args.batch_size, 3, 224, 224), torch.randint(0, 1000, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    step_s = []
    for index in range(args.steps + 1):  # the first builds the plan and buffers: not timed
        start = time.perf_counter()
        step()
        if index:
            step_s.append(time.perf_counter() - start)
    check_s = []
    for _ in range(args.calls):
        start = time.perf_counter()
        optimizer._check_step()  # what each step runs before its first all-reduce
        check_s.append(time.perf_counter() - start)
    if hvd.rank() == 0:
        gradients = sum(p.requires_grad for p in model.parameters())
        print("RESULT " + json.dumps({"gradients": gradients, "check_us": [round(s * 1e6, 1) for s in check_s],
                                      "step_ms": [round(s * 1e3, 2) for s in step_s]}), flush=True)
    hvd.shutdown()


def _plot(path: Path, result: dict, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.hist(result["check_us"], bins=40, color="tab:blue")
    left.set_xlabel("the step's check (us)")
    left.set_ylabel("calls")
    left.set_title(f"{model}, {result['gradients']} gradients, 2 ranks")
    right.bar([0, 1], [statistics.median(result["check_us"]) / 1e3, statistics.median(result["step_ms"])],
              color=["tab:blue", "tab:gray"])
    right.set_xticks([0, 1], ["check", "training step"])
    right.set_yscale("log")
    right.set_ylabel("ms (median)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="a torchvision model (default resnet50)")
    parser.add_argument("--batch-size", type=int, default=8, help="images per rank and step (default 8)")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps (default 5)")
    parser.add_argument("--calls", type=int, default=300, help="timed checks (default 300)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    load_before = _report.load_average()
    shim = Path(tempfile.mkdtemp(prefix="hvd-check-cost-"))
    try:
        bench_horovod_synthetic.write_shim(shim)  # torchvision's models without its CUDA-built ops
        stratagem = shutil.which("stratagem", path=str(Path(sys.executable).parent)) or "stratagem"
        bench = str(Path(__file__).resolve().parent)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), bench, os.environ.get("PYTHONPATH", "")]),
                   OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=loopback_interface())
        done = subprocess.run([stratagem, "run", "-np", "2", str(Path(__file__).resolve()), "--worker",
                               "--model", args.model, "--batch-size", str(args.batch_size), "--steps",
                               str(args.steps), "--calls", str(args.calls)], cwd=shim, env=env,
                              capture_output=True, text=True, timeout=args.timeout, check=False)
    finally:
        shutil.rmtree(shim, ignore_errors=True)
    lines = [line.split("RESULT ", 1)[1] for line in done.stdout.splitlines() if "RESULT " in line]  # "[rank 0] ..."
    if done.returncode != 0 or not lines:
        print(f"horovod_check_cost failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
        return 1
    result = json.loads(lines[-1])
    check_us, step_ms = statistics.median(result["check_us"]), statistics.median(result["step_ms"])
    share = check_us / (step_ms * 1e3)
    report = {"environment": _report.environment(load_before, processes=2, threads_per_process=1),
              "workload": {"model": args.model, "batch_size": args.batch_size, "gradients": result["gradients"]},
              "check_us": {"median": check_us, "min": min(result["check_us"]), "runs": result["check_us"]},
              "step_ms": {"median": step_ms, "min": min(result["step_ms"]), "runs": result["step_ms"]},
              "check_share_of_step": round(share, 6)}
    _report.write(args.out_dir, "horovod_check_cost", report, lambda path: _plot(path, result, args.model))
    print(f"horovod_check_cost: {args.model} ({result['gradients']} gradients), batch {args.batch_size}/rank, 2 ranks: "
          f"the step's check {check_us:.0f} us (median of {args.calls}; min {min(result['check_us']):.0f}), "
          f"a training step {step_ms:.1f} ms (median of {args.steps}): {share * 100:.3f}% of the step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
