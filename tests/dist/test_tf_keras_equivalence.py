"""Seed 001's CNN written with ``stratagem.tf.keras``, no wrapper: N replicas match one replica on the global batch.

The model is built and compiled in ``strategy.scope()`` and fit outside it, as TF's tutorials write it, with
Keras's SGD (momentum), a Keras metric object and a ``tf.keras.callbacks.Callback`` subclass. Two processes run
MirroredStrategy, CentralStorageStrategy and MultiWorkerMirroredStrategy (TF_CONFIG) in one spawn; each builds
from a different seed, so only the strategy can make them start equal. ParameterServerStrategy runs as a real
cluster (one server, one worker, the chief). The reference is one replica (OneDeviceStrategy) on the same global
batches. The same workers check that a plain Keras model's own fit refuses under two replicas.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stratagem
from stratagem.launcher.ports import find_free_ports
from stratagem.testing import run_workers
from stratagem.testing.ps_cluster import LocalPSCluster

pytestmark = [pytest.mark.dist, pytest.mark.timeout(240)]

STRATEGIES = ("mirrored", "central_storage", "multi_worker")


def _worker(rank: int, world_size: int, ports: list[int]) -> dict:
    from tests.dist._keras_models import become_tf_config_worker, keras_own_fit_error, train_tf_seed_cnn

    results: dict = {}
    for name, strategy in (("mirrored", stratagem.distribute.MirroredStrategy(num_replicas=world_size)),
                           ("central_storage", stratagem.distribute.CentralStorageStrategy(num_replicas=world_size))):
        results[name] = train_tf_seed_cnn(strategy, build_seed=rank)
        with strategy.scope():
            results[f"{name}_keras_own_fit"] = keras_own_fit_error()
    become_tf_config_worker(rank, ports)  # the TF-style job below makes its own group
    import stratagem.tf as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    results["multi_worker"] = train_tf_seed_cnn(strategy, build_seed=rank)
    results["multi_worker_replicas"] = strategy.num_replicas_in_sync
    results["multi_worker_keras_own_fit"] = keras_own_fit_error()  # outside any scope: the strategy exists
    return results


@pytest.fixture(scope="module")
def two_replicas() -> list[dict]:
    return run_workers(_worker, world_size=2, args=(find_free_ports(2),), timeout_s=150)


@pytest.fixture(scope="module")
def reference() -> dict:
    from tests.dist._keras_models import train_tf_seed_cnn

    return train_tf_seed_cnn(stratagem.distribute.OneDeviceStrategy())


def _assert_weights_match(weights: list[np.ndarray], expected: list[np.ndarray], what: str) -> None:
    assert len(weights) == len(expected) == 6, what
    for index, (value, target) in enumerate(zip(weights, expected)):
        np.testing.assert_allclose(value, target, rtol=0, atol=1e-5, err_msg=f"{what}, weight {index}")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_tf_keras_cnn_on_two_replicas_matches_one_replica(two_replicas: list[dict], reference: dict,
                                                          strategy: str) -> None:
    assert two_replicas[0]["multi_worker_replicas"] == 2
    for rank, result in enumerate(two_replicas):
        run = result[strategy]
        _assert_weights_match(run["weights"], reference["weights"], f"rank {rank}, {strategy}")
        # The callback's logs are the global batch's, on every replica, as TF's synced metrics are.
        np.testing.assert_allclose(run["batch_losses"], reference["batch_losses"], rtol=0, atol=1e-5)
        (logs,) = [dict(logs) for logs in run["epoch_logs"]]
        (expected,) = [dict(logs) for logs in reference["epoch_logs"]]
        assert logs.pop("model_is_users") and expected.pop("model_is_users")  # callback.model is the user's
        assert sorted(logs) == ["loss", "sparse_categorical_accuracy"]
        for key, value in expected.items():
            assert logs[key] == pytest.approx(value, abs=1e-5), (rank, strategy, key)


def test_training_moved_the_weights_so_the_match_means_something(reference: dict) -> None:
    from tests.dist._keras_models import tf_seed_cnn

    initial = tf_seed_cnn(0).get_weights()
    assert max(float(np.abs(a - b).max()) for a, b in zip(reference["weights"], initial)) > 1e-3
    assert reference["batch_losses"][-1] < reference["batch_losses"][0]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_keras_own_fit_refuses_under_two_replicas(two_replicas: list[dict], strategy: str) -> None:
    for result in two_replicas:
        message = result[f"{strategy}_keras_own_fit"]
        assert message is not None and "stratagem.Model(keras_model)" in message and "Received:" in message


def test_tf_keras_cnn_under_parameter_server_matches_one_replica(tmp_path: Path, reference: dict) -> None:
    out = tmp_path / "weights.npz"
    script = Path(__file__).parent / "ps_scripts" / "fit_tf_keras.py"
    with LocalPSCluster(script, num_workers=1, num_ps=1, log_dir=tmp_path, args=(str(out),)) as cluster:
        assert cluster.wait("chief", 0, 200) == 0, cluster.logs()
    with np.load(out) as saved:
        weights = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    _assert_weights_match(weights, reference["weights"], "parameter server")
