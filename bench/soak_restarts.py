"""Fault-injection soak: kill a random worker at a random time, many times; does training survive?

Each run starts `stratagem run -n 2 --max-restarts 3` on
tests/e2e/scripts/train_with_backup.py (BackupAndRestore every 2 batches, a
LearningRateScheduler whose schedule(epoch, lr) reads the current rate, and two
fit() calls on the same backup folder), waits until both workers run, then a random moment of their lifetime (as
measured on an uninterrupted run), SIGKILLs one of the two workers chosen at
random (the job may be starting, training or finishing), and
lets the launcher restart the group. Reported per run and in total: whether
the job finished, how many training steps ran twice (work lost between the
last backup and the kill), and the largest difference between its final
weights and an uninterrupted run's. Writes bench/results/soak.json.

    .venv/bin/python bench/soak_restarts.py --kills 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stratagem.checkpoint.io import load_state  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "scripts" / "train_with_backup.py"
FITS = 2
TOTAL_STEPS = FITS * 3 * 13


def start_job(tmp: Path, name: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "STRATAGEM_DISABLE_SCRIPT_LAUNCH"}
    env |= {"STRATAGEM_SOAK_STEPS": "1", "STRATAGEM_TIMEOUT_S": "60"}
    return subprocess.Popen(
        [sys.executable, "-m", "stratagem.launcher.cli", "run", "-n", "2", "--max-restarts", "3", str(SCRIPT),
         str(tmp / f"{name}-backup"), str(tmp / f"{name}.safetensors"), "-1", "0", str(FITS)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def worker_pids(supervisor_pid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == supervisor_pid and fields[0] not in "ZX":
                pids.append(int(entry.name))
    return sorted(pids)


def wait_for_workers(job: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while len(worker_pids(job.pid)) < 2 and time.monotonic() < deadline and job.poll() is None:
        time.sleep(0.05)


def one_run(tmp: Path, index: int, reference: dict, rng: random.Random, lifetime_s: float) -> dict:
    job = start_job(tmp, f"run{index}")
    wait_for_workers(job)
    # A random moment of the workers' lifetime (measured on the reference run):
    # start-up, rendezvous, training or the end of it.
    delay = rng.uniform(0.05, 0.8) * lifetime_s
    time.sleep(delay)
    pids = worker_pids(job.pid)
    killed = None
    if len(pids) == 2:
        killed = rng.randrange(2)
        os.kill(pids[killed], 9)
    out, err = job.communicate(timeout=300)
    result = {"run": index, "delay_s": round(delay, 2), "killed_worker": killed, "exit_code": job.returncode,
              "steps_run": out.count("STEP "), "restarts": err.count("restarting all workers")}
    result["steps_repeated"] = max(0, result["steps_run"] - TOTAL_STEPS)
    if result["restarts"] != (killed is not None):  # a restart we did not cause, or a kill that caused none
        result["stderr_tail"] = err[-2000:]
    weights = tmp / f"run{index}.safetensors"
    result["max_weight_diff"] = max(float((load_state(weights)[k] - v).abs().max()) for k, v in reference.items()) \
        if job.returncode == 0 and weights.exists() else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="runs continue until this many kills landed")
    parser.add_argument("--max-runs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/soak.json")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="stratagem-soak-") as folder:
        tmp = Path(folder)
        reference_job = start_job(tmp, "reference")
        wait_for_workers(reference_job)
        started = time.monotonic()
        reference_job.communicate(timeout=300)
        lifetime_s = time.monotonic() - started
        reference = load_state(tmp / "reference.safetensors")
        runs: list[dict] = []
        while sum(r["killed_worker"] is not None for r in runs) < args.kills and len(runs) < args.max_runs:
            runs.append(one_run(tmp, len(runs), reference, rng, lifetime_s))
            print(json.dumps(runs[-1]), flush=True)
    summary = {
        "runs": len(runs),
        "worker_lifetime_s": round(lifetime_s, 2),
        "kills": sum(r["killed_worker"] is not None for r in runs),
        "survived": sum(r["exit_code"] == 0 for r in runs),
        "steps_repeated_total": sum(r["steps_repeated"] for r in runs),
        "max_weight_diff": max((r["max_weight_diff"] or 0.0) for r in runs),
        "weights_mismatch_runs": sum(r["max_weight_diff"] is None or r["max_weight_diff"] > 1e-6 for r in runs),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"summary": summary, "runs": runs, "torch": torch.__version__}, indent=2))
    print("SUMMARY " + json.dumps(summary))


if __name__ == "__main__":
    main()
