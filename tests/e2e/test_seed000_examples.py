"""Seed 000's three snippets (numpy input, tf.data input, MirroredStrategy) run through stratagem.tf and learn.

Thresholds and launch forms: tests/e2e/_seed_examples.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._seed_examples import TIMEOUT_S, Case, check_case, keras_home, params  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

CASES = [
    Case("seed000_numpy_input.py", "python", {}, r"val_accuracy: ([\d.]+)", 0.85,
         "the seed's whole run (10 epochs of 16 Adam steps of 256): 0.918-0.927 over runs; the seed prints no number",
         uses=("keras.datasets.mnist.load_data", "keras.utils.to_categorical")),
    Case("seed000_tf_data_input.py", "python", {}, r"val_accuracy: ([\d.]+)", 0.85,
         "the same model and steps as the numpy run, fed by the tf.data pipeline: 0.913-0.914 over runs",
         uses=("keras.datasets.mnist.load_data", "cast", "float64", "expand_dims", "one_hot", "int32",
               "data.Dataset", "data.experimental.AUTOTUNE")),
    Case("seed000_mirrored.py", "run2", {}, r"\[rank 0\].*val_accuracy: ([\d.]+)", 0.85,
         "the seed's whole run; global batch 512 over 2 replicas, half the steps: 0.919-0.921 over runs",
         uses=("keras.datasets.mnist.load_data", "cast", "float64", "expand_dims", "one_hot", "int32",
               "data.Dataset", "data.experimental.AUTOTUNE", "distribute.MirroredStrategy")),
]


@pytest.mark.timeout(TIMEOUT_S + 20)
@pytest.mark.parametrize("case", params(CASES))
def test_example_runs_and_reaches_its_accuracy(case: Case, keras_home: Path, tmp_path: Path) -> None:
    check_case(case, keras_home, tmp_path)
