"""Seed 001's simple_worker_mnist.py: two workers, each started with its own TF_CONFIG, train and learn.

Thresholds and launch forms: tests/e2e/_seed_examples.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stratagem.testing.warm_processes import TEST_SEED_ENV
from tests.e2e._seed_examples import TIMEOUT_S, Case, check_case, keras_home, params  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

CASES = [
    Case("simple_worker_mnist.py", "tf_config2", {}, r"accuracy: ([\d.]+)", 0.50,
         "the basic run's 210 SGD(0.001) steps on a global batch of 128 over 2 workers; seeded (the run repeats "
         "exactly) it reaches 0.594; seeds 1-3 gave 0.39-0.59 and unseeded runs 0.42-0.56",
         env={TEST_SEED_ENV: "1"},
         uses=("config.experimental.list_physical_devices", "config.experimental.set_memory_growth",
               "keras.datasets.fashion_mnist.load_data", "data.Dataset",
               "distribute.MultiWorkerMirroredStrategy")),
]


@pytest.mark.timeout(TIMEOUT_S + 20)
@pytest.mark.parametrize("case", params(CASES))
def test_example_runs_and_reaches_its_accuracy(case: Case, keras_home: Path, tmp_path: Path) -> None:
    check_case(case, keras_home, tmp_path)

