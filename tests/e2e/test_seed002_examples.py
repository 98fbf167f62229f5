"""Seed 002's custom loop (global-batch loss, strategy.run) and its TF_CONFIG cluster run and learn.

Thresholds and launch forms: tests/e2e/_seed_examples.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._seed_examples import TIMEOUT_S, Case, check_case, keras_home, params  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

CASES = [
    Case("seed002_custom_loop.py", "run2", {"SEED_EPOCHS": "1"}, r"\[rank 0\].*Test Accuracy: ([\d.]+)", 85.0,
         "one epoch of the custom loop (125 steps of global batch 32, Adam); printed in percent as TF's tutorial",
         uses=("keras.datasets.mnist.load_data", "distribute.MirroredStrategy", "data.Dataset",
               "keras.losses.Reduction", "nn.compute_average_loss", "keras.metrics.Mean.reset_state", "GradientTape",
               "function", "distribute.ReduceOp")),
    Case("seed002_tf_config.py", "argv2", {"SEED_EPOCHS": "2"}, r"Test accuracy: ([\d.]+)", 0.80,
         "2 epochs of the 128-unit MLP (global batch 32, Adam)",
         uses=("keras.datasets.mnist.load_data", "distribute.MultiWorkerMirroredStrategy", "data.Dataset")),
]


@pytest.mark.timeout(TIMEOUT_S + 20)
@pytest.mark.parametrize("case", params(CASES))
def test_example_runs_and_reaches_its_accuracy(case: Case, keras_home: Path, tmp_path: Path) -> None:
    check_case(case, keras_home, tmp_path)
