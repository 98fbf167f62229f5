"""Horovod's pytorch_mnist shape (examples/horovod_mnist.py) under `stratagem run -np 2` learns the digits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "examples" / "horovod_mnist.py"


def test_horovod_mnist_example_under_np_2_reaches_90_percent_test_accuracy() -> None:
    # Short epochs: batches of 16 per process give enough steps in 2 epochs of the 4,000 training digits.
    command = [sys.executable, "-m", "stratagem.launcher.cli", "run", "-np", "2", str(EXAMPLE),
               "--epochs", "2", "--batch-size", "16", "--momentum", "0.9", "--log-interval", "1000"]
    proc = subprocess.run(command, env=dict(os.environ, STRATAGEM_TIMEOUT_S="60"), capture_output=True, text=True,
                          timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Only rank 0 prints the averaged test metrics, once per epoch.
    accuracies = [float(a) for a in re.findall(r"\[rank 0\] Test set: .*Accuracy: ([\d.]+)%", proc.stdout)]
    assert len(accuracies) == 2, proc.stdout[-3000:]
    assert "[rank 1] Test set" not in proc.stdout
    assert accuracies[-1] > 90.0, accuracies
