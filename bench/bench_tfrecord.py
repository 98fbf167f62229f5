"""TFRecord reading and parsing: stratagem against tf.data on the same files (``make bench``).

The workload (``_tfrecord_workload.py``): 8 TFRecord files of 12,500
``tf.train.Example`` records each (a 784-byte raw uint8 image, an int64 label,
16 floats; 100,000 records, 92 MB), written by stratagem's ``TFRecordWriter`` (the
bytes TF's writer writes) into a temporary folder. Both sides run the same lines,
tf.data's recommended reader at its strongest settings::

    TFRecordDataset(files, num_parallel_reads=AUTOTUNE).batch(256)
        .map(parse_example + decode_raw of the image, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)

one full epoch per repeat, each after a 5-batch warm-up of a fresh pipeline.
Goal: stratagem's best records/s >= 1.0x TensorFlow's best.

TensorFlow is never a dependency, so ``make bench`` compares against TF's figure
recorded below (``TF_RECORDED``: measured once with TensorFlow 2.21 under the
shared CPU lock, its command beside it). ``--tf-python PATH`` measures TF again,
in a subprocess of that interpreter on the same files. Writes ``tfrecord.json``
and ``tfrecord.png`` under ``--out-dir``, prints PASS/FAIL, exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import _report  # noqa: E402
import _tfrecord_workload as workload  # noqa: E402

GOAL = 1.0
# TF 2.21.0 CPU, this 2-core machine, under flock /tmp/stratagem-cpu.lock, 3 repeats, on the files this bench writes:
#   .venv/bin/python bench/bench_tfrecord.py --tf-python /work/wt/tfvenv/bin/python
# (stratagem's side of that run: 108,349-113,948 records/s, 1.45x TF's best.)
TF_RECORDED: dict[str, Any] = {"tensorflow": "2.21.0", "rates": [78538.9, 39142.3, 39050.5],
                               "date": "2026-11-25T18:13:32+00:00"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="epochs per side; the best counts (default 3)")
    parser.add_argument("--tf-python", type=Path, default=None,
                        help="a Python with tensorflow installed: measure TF now instead of using TF_RECORDED")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where tfrecord.json and tfrecord.png go (default bench/results)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1. Received: --repeats={args.repeats}")
    return args


def _tensorflow_side(tf_python: Path | None, directory: Path, repeats: int) -> dict[str, Any]:
    if tf_python is None:
        return {**TF_RECORDED, "source": "recorded (TF_RECORDED in bench/bench_tfrecord.py)"}
    script = Path(__file__).resolve().parent / "_tfrecord_workload.py"
    done = subprocess.run([str(tf_python), str(script), str(directory), str(repeats)], capture_output=True,
                          text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the TensorFlow side failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "source": f"measured now with {tf_python}"}


def _plot(path: Path, stratagem_rates: list[float], tf_rates: list[float], ratio: float, passed: bool) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
    for position, (name, rates, color) in enumerate((("tf.data", tf_rates, "tab:gray"),
                                                     ("stratagem", stratagem_rates, "tab:blue"))):
        left.bar(position, max(rates), width=0.6, color=color)
        left.vlines(position, min(rates), max(rates), colors="black")
    left.set_xticks([0, 1], ["tf.data 2.21", "stratagem"])
    left.set_ylabel("records / s (bar: best; line: min-max)")
    left.set_title("TFRecordDataset + parse_example")
    _report.plot_ratios(right, {"tfrecord": {"ratio": ratio, "goal": GOAL, "passed": passed,
                                             "title": "stratagem / tf.data"}}, "records/s ratio")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = _report.load_average()
    with tempfile.TemporaryDirectory(prefix="bench-tfrecord-") as folder:
        files = workload.write_files(Path(folder))
        stratagem_rates = workload.stratagem_rates(files, args.repeats)
        tensorflow = _tensorflow_side(args.tf_python, Path(folder), args.repeats)
    if not tensorflow["rates"]:
        print("FAIL tfrecord: no TensorFlow figure recorded; run with --tf-python", file=sys.stderr)
        return 1
    ratio = max(stratagem_rates) / max(tensorflow["rates"])
    passed = ratio >= GOAL
    print(f"{'side':<12}{'min rec/s':>12}{'max rec/s':>12}")
    for name, rates in (("tf.data", tensorflow["rates"]), ("stratagem", stratagem_rates)):
        print(f"{name:<12}{min(rates):>12,.0f}{max(rates):>12,.0f}")
    print(f"{'PASS' if passed else 'FAIL'} tfrecord: stratagem / tf.data = {ratio:.3f}x (goal >= {GOAL}x; "
          f"TF {tensorflow['source']})")
    report = {"environment": _report.environment(load_before, repeats=args.repeats),
              "workload": {"files": workload.NUM_FILES, "records": workload.NUM_FILES * workload.RECORDS_PER_FILE,
                           "batch_size": workload.BATCH_SIZE},
              "stratagem_rates": stratagem_rates, "tensorflow": tensorflow, "ratio": ratio, "goal": GOAL,
              "passed": passed}
    _report.write(args.out_dir, "tfrecord", report,
                  lambda path: _plot(path, stratagem_rates, tensorflow["rates"], ratio, passed))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
