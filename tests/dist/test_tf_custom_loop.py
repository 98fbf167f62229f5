"""The custom training loop as TF writes it (seed 002's shape: a tf.function calling strategy.run(train_step) with
a GradientTape, tf.nn.compute_average_loss, a Keras optimizer's apply_gradients, strategy.reduce) on 2 replicas matches one replica
on the global batch; Keras metrics read outside run give the global value; a tf.train.Checkpoint saved on 2
replicas restores on 1 and on 3."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import stratagem  # noqa: F401  (before keras: the torch backend)
import stratagem.tf as tf
import keras  # after stratagem: the torch backend
from stratagem.models.keras_internals import local_result
from stratagem.testing import run_workers

pytestmark = [pytest.mark.dist, pytest.mark.timeout(240)]

GLOBAL_BATCH = 8
STEPS = 6
# Keras used directly (SGD with momentum), and through the facade as a TF script writes it (tf.keras, Adam).
OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
    "adam": lambda: tf.keras.optimizers.Adam(learning_rate=0.01),
}


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, 6)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + 2 * (x[:, 2] > 0).astype(np.int64)
    return x, y


def _model(seed: int, facade: bool) -> keras.Model:
    keras.utils.set_random_seed(seed)
    if facade:
        return tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(16, activation="relu"),
                                    tf.keras.layers.Dense(4)])
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)])


def _train(strategy: object, optimizer_name: str, seed: int) -> dict:
    """Seed 002 / TF's custom_training tutorial, with the strategy given (or none: one replica)."""
    scope = strategy.scope() if strategy is not None else _null_scope()
    with scope:
        facade = optimizer_name == "adam"
        model = _model(seed, facade)  # under 2 replicas: each rank seeds differently; the chief's weights win
        loss_object = (tf.keras if facade else keras).losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                                           reduction="none")
        optimizer = OPTIMIZERS[optimizer_name]()
        train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        train_loss = keras.metrics.Mean(name="train_loss")

    def train_step(inputs: tuple) -> torch.Tensor:
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            per_example_loss = loss_object(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        train_loss.update_state(per_example_loss)
        return loss.detach()

    @tf.function
    def distributed_train_step(dataset_inputs: tuple) -> torch.Tensor:
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        assert len(strategy.experimental_local_results(per_replica_losses)) == 1
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    x, y = _data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    losses = []
    if strategy is None:
        for batch in dataset:
            losses.append(float(train_step(batch)))
    else:
        for batch in strategy.experimental_distribute_dataset(dataset):
            losses.append(float(distributed_train_step(batch)))
    return {"model": model, "optimizer": optimizer, "metric": train_accuracy, "loss_metric": train_loss, "losses": losses,
            "weights": [w.numpy() for w in model.weights], "slots": [v.numpy() for v in optimizer.variables]}


class _null_scope:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _worker_train_and_save(rank: int, world_size: int, folder: str) -> dict:
    strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0", "/cpu:1"],
                                              cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
    out: dict = {}
    for name in OPTIMIZERS:
        run = _train(strategy, name, seed=100 + rank)
        out[name] = {"losses": run["losses"], "weights": run["weights"], "slots": run["slots"],
                     "accuracy": float(run["metric"].result()), "local_accuracy": float(local_result(run["metric"])),
                     "accuracy_in_run": float(strategy.run(lambda m=run["metric"]: m.result())),
                     "mean_loss": float(run["loss_metric"].result()),
                     "local_mean_loss": float(local_result(run["loss_metric"]))}
    # The Adam run is the one checkpointed: model, optimizer (slots), metric and a step counter.
    step = tf.Variable(STEPS, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=run["model"], optimizer=run["optimizer"], metric=run["metric"], step=step)
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=2)
    out["paths"] = [manager.save() for _ in range(3)]
    out["files"] = sorted(os.listdir(folder))
    out["latest"] = tf.train.latest_checkpoint(folder)
    return out


def _worker_central_storage(rank: int, world_size: int) -> dict:
    strategy = tf.distribute.experimental.CentralStorageStrategy(compute_devices=["/cpu:0", "/cpu:1"])
    run = _train(strategy, "sgd_momentum", seed=100 + rank)
    return {"losses": run["losses"], "weights": run["weights"], "accuracy": float(run["metric"].result())}


def _restore_fresh(strategy: object, folder: str, seed: int) -> dict:
    scope = strategy.scope() if strategy is not None else _null_scope()
    with scope:
        model = _model(seed, facade=True)
        optimizer = OPTIMIZERS["adam"]()
        metric = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        step = tf.Variable(0, dtype=tf.int64)
    status = tf.train.Checkpoint(model=model, optimizer=optimizer, metric=metric, step=step).restore(
        tf.train.latest_checkpoint(folder))
    status.assert_consumed()
    return {"weights": [w.numpy() for w in model.weights], "slots": [v.numpy() for v in optimizer.variables],
            "metric_state": [np.asarray(v.numpy()) for v in metric.variables], "step": int(step.numpy())}


def _worker_restore(rank: int, world_size: int, folder: str) -> dict:
    strategy = tf.distribute.MirroredStrategy(num_replicas=world_size)
    return _restore_fresh(strategy, folder, seed=200 + rank)


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], str]:
    folder = str(tmp_path_factory.mktemp("ckpts"))
    return run_workers(_worker_train_and_save, world_size=2, args=(folder,), timeout_s=180), folder


@pytest.mark.parametrize("optimizer_name", list(OPTIMIZERS))
def test_gradient_tape_loop_on_two_replicas_matches_one_replica_on_global_batch(
        two_replicas: tuple[list[dict], str], optimizer_name: str) -> None:
    results, _ = two_replicas
    reference = _train(None, optimizer_name, seed=100)  # the chief's seed: the weights every replica starts from
    for rank, result in enumerate(results):
        run = result[optimizer_name]
        np.testing.assert_allclose(run["losses"], reference["losses"], rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}")
        for got, want in zip(run["weights"] + run["slots"], reference["weights"] + reference["slots"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"rank {rank}")


def test_gradient_tape_loop_under_central_storage_matches_one_replica() -> None:
    reference = _train(None, "sgd_momentum", seed=100)
    for rank, result in enumerate(run_workers(_worker_central_storage, world_size=2, timeout_s=120)):
        np.testing.assert_allclose(result["losses"], reference["losses"], rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}")
        for got, want in zip(result["weights"], reference["weights"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"rank {rank}")
        assert result["accuracy"] == pytest.approx(float(reference["metric"].result()), abs=1e-7)


def test_keras_metric_read_outside_run_gives_global_value_on_both_ranks(two_replicas: tuple[list[dict], str]) -> None:
    results, _ = two_replicas
    for name in OPTIMIZERS:
        reference = _train(None, name, seed=100)
        for result in results:
            assert result[name]["accuracy"] == pytest.approx(float(reference["metric"].result()), abs=1e-7)
            assert result[name]["mean_loss"] == pytest.approx(float(reference["loss_metric"].result()), rel=1e-5)
            assert result[name]["accuracy_in_run"] == result[name]["local_accuracy"]  # replica context: local
        # Each rank saw its own half of every batch: the local values differ, the global one does not.
        assert results[0][name]["local_mean_loss"] != pytest.approx(results[1][name]["local_mean_loss"], rel=1e-3)
        local_mean = (results[0][name]["local_mean_loss"] + results[1][name]["local_mean_loss"]) / 2
        assert local_mean == pytest.approx(results[0][name]["mean_loss"], rel=1e-5)  # equal halves


def test_checkpoint_manager_on_two_replicas_keeps_two_and_names_latest(two_replicas: tuple[list[dict], str]) -> None:
    results, folder = two_replicas
    for result in results:
        assert [os.path.basename(p) for p in result["paths"]] == ["ckpt-1", "ckpt-2", "ckpt-3"]
        assert result["latest"] == os.path.join(folder, "ckpt-3")
        assert result["files"] == ["checkpoint", "ckpt-2.ckpt", "ckpt-3.ckpt"]
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]


def test_checkpoint_saved_on_two_replicas_restores_on_one_and_three(two_replicas: tuple[list[dict], str]) -> None:
    results, folder = two_replicas
    saved = results[0]["adam"]
    one = _restore_fresh(None, folder, seed=300)
    three = run_workers(_worker_restore, world_size=3, args=(folder,), timeout_s=150)
    for restored in [one, *three]:
        assert restored["step"] == STEPS
        assert len(restored["slots"]) == len(saved["slots"])
        for got, want in zip(restored["weights"] + restored["slots"], saved["weights"] + saved["slots"]):
            np.testing.assert_array_equal(got, want)
        assert restored["metric_state"][0] > 0  # the local sums of the chief's metric were saved and restored
