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
from tests.dist._models import classification_data, small_cnn, state_as_numpy

pytestmark = pytest.mark.dist

GLOBAL_BATCH = 16
# 24 full steps and a short last batch of 5 examples (split 3 + 2 on two replicas).
NUM_SAMPLES = GLOBAL_BATCH * 24 + 5
OPTIMIZERS = ("sgd", "adam")


def _train(optimizer: str) -> dict:
    x, y = classification_data(NUM_SAMPLES)
    model = stratagem.Model(small_cnn())
    model.compile(optimizer=optimizer, loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    torch.manual_seed(123)  # the shuffle seed is drawn from torch's RNG on the chief
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, verbose=0)
    x_test, y_test = classification_data(37, seed=7)  # 37: uneven on every batch size used
    return {
        "state": state_as_numpy(model.module),
        "history": history.history,
        "evaluate": model.evaluate(x_test, y_test, batch_size=8, return_dict=True),
        "predict": model.predict(x_test, batch_size=8),
    }


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
