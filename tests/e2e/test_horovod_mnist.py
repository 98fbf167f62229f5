"""Horovod's pytorch_mnist shape (examples/horovod_mnist.py) on 2 workers as `stratagem run -np 2` starts them learns.

The workers are warm processes with the environment `stratagem run -np 2` gives its workers (``run_launched``):
the test is about the example's training and what each rank prints, not the launcher's exec path (``-np`` is
test_horovod_host_flags', the exec path test_launcher's and test_horovod_upstream_runner's), which saves two
interpreters' start-up (~7 s of CPU).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.e2e._seed_examples import run_launched

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).parents[2] / "examples" / "horovod_mnist.py"


def test_horovod_mnist_example_under_np_2_reaches_90_percent_test_accuracy(tmp_path: Path) -> None:
    # Short epochs: batches of 16 per process give enough steps in 2 epochs of the 4,000 training digits.
    command = [str(EXAMPLE), "--epochs", "2", "--batch-size", "16", "--momentum", "0.9", "--log-interval", "1000"]
    stdout = run_launched(command, 2, env=dict(os.environ, STRATAGEM_TIMEOUT_S="60"), cwd=tmp_path,
                          what=EXAMPLE.name, timeout_s=110)
    # Only rank 0 prints the averaged test metrics, once per epoch.
    accuracies = [float(a) for a in re.findall(r"\[rank 0\] Test set: .*Accuracy: ([\d.]+)%", stdout)]
    assert len(accuracies) == 2, stdout[-3000:]
    assert "[rank 1] Test set" not in stdout
    assert accuracies[-1] > 90.0, accuracies
