"""Seed 001's basic run and simple_worker_mnist.py (two workers, TF_CONFIG each) run and learn.

Thresholds and launch forms: tests/e2e/_seed_examples.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._seed_examples import TIMEOUT_S, Case, check_case, keras_home, params  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

CASES = [
    Case("seed001_basic.py", "python", {}, r"accuracy: ([\d.]+)", 0.40,
         "the seed's whole run, 3 x 70 steps of SGD(0.001): TF 2.21 reaches 0.562 on these digits (far from converged)",
         uses=("config.experimental.list_physical_devices", "config.experimental.set_memory_growth",
               "keras.datasets.fashion_mnist.load_data", "data.Dataset")),
    Case("simple_worker_mnist.py", "tf_config2", {}, r"accuracy: ([\d.]+)", 0.40,
         "the basic run's 210 SGD(0.001) steps, on a global batch of 128 over 2 workers",
         uses=("config.experimental.list_physical_devices", "config.experimental.set_memory_growth",
               "keras.datasets.fashion_mnist.load_data", "data.Dataset",
               "distribute.MultiWorkerMirroredStrategy")),
]


@pytest.mark.timeout(TIMEOUT_S + 20)
@pytest.mark.parametrize("case", params(CASES))
def test_example_runs_and_reaches_its_accuracy(case: Case, keras_home: Path, tmp_path: Path) -> None:
    check_case(case, keras_home, tmp_path)

