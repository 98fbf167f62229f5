"""CentralStorageStrategy: two replicas match one on the global batch; optimizer state exists once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import stratagem
from stratagem.testing import run_workers
from tests.dist._models import train_small_cnn

pytestmark = pytest.mark.dist

OPTIMIZERS = ("sgd", "adam")


def _worker_central(rank: int, world_size: int) -> dict:
    central = stratagem.distribute.CentralStorageStrategy(num_replicas=world_size)
    with central.scope():
        results = {name: train_small_cnn(name) for name in OPTIMIZERS}
    # The same job, same process group, as MirroredStrategy: each replica keeps its own optimizer state.
    mirrored = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    with mirrored.scope():
        results["mirrored_adam"] = train_small_cnn("adam")
    return results


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_workers(_worker_central, world_size=2, timeout_s=100)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_two_replicas_match_one_replica(results: list[dict], optimizer: str) -> None:
    reference = train_small_cnn(optimizer)
    for rank, result in enumerate(results):
        for name, expected in reference["state"].items():
            torch.testing.assert_close(torch.from_numpy(result[optimizer]["state"][name]), torch.from_numpy(expected),
                                       rtol=0, atol=1e-5, msg=lambda m: f"rank {rank}, {optimizer}, {name}: {m}")
        np.testing.assert_allclose(result[optimizer]["history"]["loss"], reference["history"]["loss"], rtol=1e-5)
        np.testing.assert_allclose(result[optimizer]["predict"], reference["predict"], rtol=1e-5, atol=1e-6)


def test_optimizer_state_exists_once_not_per_replica(results: list[dict]) -> None:
    chief, other = (r["adam"]["optimizer_state_bytes"] for r in results)
    mirrored = [r["mirrored_adam"]["optimizer_state_bytes"] for r in results]
    num_params = sum(v.size for v in results[0]["adam"]["state"].values())
    assert chief >= 2 * 4 * num_params  # Adam's two moments, float32, on the chief
    assert other == 0, "a non-chief replica must hold no optimizer state"
    assert mirrored[0] == mirrored[1] == chief  # MirroredStrategy: one full copy per replica
    assert chief + other == sum(mirrored) / 2
