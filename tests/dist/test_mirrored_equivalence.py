"""N replicas on a global batch must match one replica on that batch.

The parent computes the reference with the default (one-device) strategy;
two gloo workers run MirroredStrategy with the same initial weights, data and
shuffle seed. Parameters, logged loss and metrics, evaluation and predictions
must agree.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import stratagem
from stratagem.testing import run_workers
from tests.dist._models import small_cnn, state_as_numpy, train_small_cnn as _train

pytestmark = pytest.mark.dist

OPTIMIZERS = ("sgd", "adam")


def _worker_fit(rank: int, world_size: int) -> dict:
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    with strategy.scope():
        return {name: _train(name) for name in OPTIMIZERS}


@pytest.fixture(scope="module")
def two_replica_results() -> list[dict]:
    return run_workers(_worker_fit, world_size=2, timeout_s=100)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_two_replicas_match_one_replica_weights(two_replica_results: list[dict], optimizer: str) -> None:
    reference = _train(optimizer)
    for rank, result in enumerate(two_replica_results):
        for name, expected in reference["state"].items():
            torch.testing.assert_close(
                torch.from_numpy(result[optimizer]["state"][name]), torch.from_numpy(expected),
                rtol=0, atol=1e-5, msg=lambda m: f"rank {rank}, {optimizer}, {name}: {m}",
            )


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_two_replicas_log_global_loss_and_metrics(two_replica_results: list[dict], optimizer: str) -> None:
    reference = _train(optimizer)
    for result in two_replica_results:
        for key in ("loss", "accuracy"):
            np.testing.assert_allclose(result[optimizer]["history"][key], reference["history"][key], rtol=1e-5)
        for key, value in reference["evaluate"].items():
            assert result[optimizer]["evaluate"][key] == pytest.approx(value, rel=1e-5), key
        np.testing.assert_allclose(result[optimizer]["predict"], reference["predict"], rtol=1e-5, atol=1e-6)


def test_training_changes_weights_so_equivalence_is_not_vacuous(two_replica_results: list[dict]) -> None:
    initial = state_as_numpy(small_cnn())
    trained = two_replica_results[0]["sgd"]["state"]
    assert max(float(np.abs(trained[k] - initial[k]).max()) for k in initial) > 1e-3
