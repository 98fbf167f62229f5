"""Seed 003's CentralStorage, ParameterServer and tf.data-tips examples run and learn.

Thresholds and launch forms: tests/e2e/_seed_examples.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._seed_examples import TIMEOUT_S, Case, check_case, keras_home, params  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

CASES = [
    Case("seed003_central_storage.py", "run2", {"SEED_EPOCHS": "2"}, r"\[rank 0\] Test accuracy: ([\d.]+)", 0.80,
         "2 epochs of the 128-unit MLP (global batch 64, Adam)",
         uses=("keras.datasets.mnist.load_data", "distribute.experimental.CentralStorageStrategy")),
    Case("seed003_parameter_server.py", "ps", {"SEED_EPOCHS": "2"}, r"\[chief\] Test accuracy: ([\d.]+)", 0.80,
         "2 epochs of 60 asynchronous SGD(0.1) steps of 64 on the MLP",
         uses=("keras.datasets.mnist.load_data", "distribute.cluster_resolver.TFConfigClusterResolver",
               "distribute.experimental.ParameterServerStrategy", "data.Dataset")),
    Case("seed003_tf_data_tips.py", "python", {"SEED_EPOCHS": "2"}, r"Test accuracy: ([\d.]+)", 0.80,
         "2 epochs of the MLP fed from 4 interleaved CSV shards",
         uses=("keras.datasets.mnist.load_data", "data.Dataset", "data.TextLineDataset", "data.AUTOTUNE",
               "strings.to_number", "strings.split", "int32", "reshape", "cast", "float32", "reduce_max")),
]


@pytest.mark.timeout(TIMEOUT_S + 20)
@pytest.mark.parametrize("case", params(CASES))
def test_example_runs_and_reaches_its_accuracy(case: Case, keras_home: Path, tmp_path: Path) -> None:
    check_case(case, keras_home, tmp_path)
