"""A Keras 3 model under every strategy: two replicas match one on the global batch; PS trains a frozen-block model.

Seed 001's CNN as ``keras.Sequential`` (channels last), compiled with Keras's own
optimizer and loss objects, 20 steps: MirroredStrategy, CentralStorageStrategy and
MultiWorkerMirroredStrategy (from TF_CONFIG) on two processes against one replica on
the global batch, SGD with momentum and Adam, weights within 1e-5. Each replica builds
its model from a different Keras seed: the strategy's broadcast must make them start
equal. One spawn runs all three strategies (Keras's import costs seconds per process).
ParameterServerStrategy (one server, one worker, the chief): a functional model with a
frozen block and dict features trains through Model.fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import stratagem
from stratagem.launcher.ports import find_free_ports
from stratagem.testing.ps_cluster import LocalPSCluster
from stratagem.testing import run_workers

pytestmark = [pytest.mark.dist, pytest.mark.timeout(240)]

OPTIMIZERS = ("sgd", "adam")
STRATEGIES = ("mirrored", "central_storage", "multi_worker")


def _worker_keras(rank: int, world_size: int, ports: list[int]) -> dict:
    from tests.dist._keras_models import become_tf_config_worker, train_frozen_block, train_seed_cnn

    results: dict = {}
    # rank-dependent initial weights: only the strategy's broadcast can make the replicas agree
    for name, strategy in (("mirrored", stratagem.distribute.MirroredStrategy(num_replicas=world_size)),
                           ("central_storage", stratagem.distribute.CentralStorageStrategy(num_replicas=world_size))):
        with strategy.scope():
            results[name] = {opt: train_seed_cnn(opt, build_seed=rank) for opt in OPTIMIZERS}
            results[name]["frozen"] = train_frozen_block(seed=10 + rank)
    become_tf_config_worker(rank, ports)  # the TF-style job below makes its own group
    strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        results["multi_worker"] = {opt: train_seed_cnn(opt, build_seed=rank) for opt in OPTIMIZERS}
    results["multi_worker_replicas"] = strategy.num_replicas_in_sync
    return results


@pytest.fixture(scope="module")
def two_replica_results() -> list[dict]:
    return run_workers(_worker_keras, world_size=2, args=(find_free_ports(2),), timeout_s=110)


@pytest.fixture(scope="module")
def references() -> dict[str, dict[str, np.ndarray]]:
    from tests.dist._keras_models import train_seed_cnn

    return {opt: train_seed_cnn(opt) for opt in OPTIMIZERS}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_keras_seed_cnn_two_replicas_match_one_replica(two_replica_results: list[dict], references: dict,
                                                       strategy: str, optimizer: str) -> None:
    reference = references[optimizer]
    assert two_replica_results[0]["multi_worker_replicas"] == 2
    for rank, result in enumerate(two_replica_results):
        state = result[strategy][optimizer]
        assert sorted(state) == sorted(reference)
        for name, expected in reference.items():
            torch.testing.assert_close(torch.from_numpy(state[name]), torch.from_numpy(expected), rtol=0, atol=1e-5,
                                       msg=lambda m: f"rank {rank}, {strategy}, {optimizer}, {name}: {m}")


@pytest.mark.parametrize("strategy", ["mirrored", "central_storage"])
def test_frozen_block_keeps_the_chiefs_weights_under_weight_decay(two_replica_results: list[dict], strategy: str) -> None:
    chief = two_replica_results[0][strategy]["frozen"]
    for rank, result in enumerate(two_replica_results):
        for name, value in result[strategy]["frozen"]["after"].items():  # AdamW would decay a frozen weight
            np.testing.assert_array_equal(value, chief["before"][name], err_msg=f"rank {rank}, {name}")


def test_batch_normalization_statistics_follow_the_chief_under_mirrored(two_replica_results: list[dict]) -> None:
    chief, other = (result["mirrored"]["frozen"] for result in two_replica_results)
    # Replica 0 always gets dark images, replica 1 bright ones. DDP broadcasts the chief's statistics
    # before each step (as torch BN buffers), so replica 1 ends at half the chief's and half its own last
    # batch (momentum 0.5): a gap of half the bright-dark difference. Kept local, replica 1's statistics
    # would be its own (~the whole difference after six steps).
    gap = other["moving_mean"] - chief["moving_mean"]
    expected = 0.5 * chief["bright_minus_dark"]
    assert np.abs(expected).max() > 0.05, "the replicas' data must differ for the check to mean anything"
    np.testing.assert_allclose(gap, expected, rtol=0, atol=0.2 * np.abs(expected).max())


def test_keras_training_moves_weights_so_equivalence_is_not_vacuous(references: dict) -> None:
    from tests.dist._keras_models import seed_cnn

    initial = {k: v.detach().numpy() for k, v in stratagem.Model(seed_cnn(0)).module.state_dict().items()}
    for optimizer, state in references.items():
        assert max(float(np.abs(state[k] - initial[k]).max()) for k in initial) > 1e-3, optimizer


def test_keras_frozen_block_model_trains_under_parameter_server_strategy(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    script = Path(__file__).parent / "ps_scripts" / "fit_keras.py"
    with LocalPSCluster(script, num_workers=1, num_ps=1, log_dir=tmp_path, args=(str(out),)) as cluster:
        assert cluster.wait("chief", 0, 200) == 0, cluster.logs()
    result = json.loads(out.read_text())
    assert result["frozen_change"] == 0.0 and result["frozen_equals_chief_seed"], result
    assert result["head_change"] > 1e-3, result
    assert result["evaluate"]["accuracy"] > 0.5, result  # ten digits: chance is 0.1
