"""tf.train.Checkpoint, CheckpointManager and latest_checkpoint on one process; tf.saved_model; TF 1 optimizers."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

import stratagem
import stratagem.tf as tf
import keras  # after stratagem: the torch backend
from stratagem.errors import CheckpointError


def _keras_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.BatchNormalization(),
                             keras.layers.Dense(2)])


def _step(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
    x = torch.arange(12.0).reshape(4, 3) / 10
    with tf.GradientTape() as tape:
        loss = model(x, training=True).square().mean()
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))


def test_save_restores_keras_model_optimizer_slots_and_variables_into_fresh_objects(tmp_path: object) -> None:
    model, optimizer = _keras_model(1), keras.optimizers.Adam(0.1)
    step = keras.Variable(7, dtype="int64", trainable=False)
    _step(model, optimizer)
    path = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step).save(os.path.join(tmp_path, "ckpt"))
    assert path == os.path.join(tmp_path, "ckpt-1")
    fresh_model, fresh_optimizer = _keras_model(2), keras.optimizers.Adam(0.1)
    fresh_step = keras.Variable(0, dtype="int64", trainable=False)
    checkpoint = tf.train.Checkpoint(model=fresh_model, optimizer=fresh_optimizer, step=fresh_step)
    checkpoint.restore(tf.train.latest_checkpoint(str(tmp_path))).assert_consumed()
    for got, want in zip(fresh_model.weights + fresh_optimizer.variables, model.weights + optimizer.variables):
        np.testing.assert_array_equal(got.numpy(), want.numpy())  # BatchNorm statistics and Adam moments too
    assert int(fresh_step.numpy()) == 7 and int(checkpoint.save_counter) == 1
    # The restored optimizer continues exactly as the original does.
    _step(model, optimizer)
    _step(fresh_model, fresh_optimizer)
    for got, want in zip(fresh_model.weights, model.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_torch_module_optimizer_and_stratagem_model_round_trip_with_write_and_read(tmp_path: object) -> None:
    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    model = stratagem.Model(torch.nn.Linear(2, 2))
    path = tf.train.Checkpoint(net=net, optimizer=optimizer, model=model).write(os.path.join(tmp_path, "state"))
    assert os.path.isfile(path + ".ckpt") and not os.path.exists(os.path.join(tmp_path, "checkpoint"))
    net2, model2 = torch.nn.Linear(3, 2), stratagem.Model(torch.nn.Linear(2, 2))
    optimizer2 = torch.optim.SGD(net2.parameters(), lr=0.1, momentum=0.9)
    tf.train.Checkpoint(net=net2, optimizer=optimizer2, model=model2).read(path).assert_consumed()
    torch.testing.assert_close(net2.weight, net.weight, rtol=0, atol=0)
    torch.testing.assert_close(model2.module.weight, model.module.weight, rtol=0, atol=0)
    momentum = optimizer2.state_dict()["state"][0]["momentum_buffer"]
    torch.testing.assert_close(momentum, optimizer.state_dict()["state"][0]["momentum_buffer"], rtol=0, atol=0)


def test_partial_restore_is_reported_by_assert_consumed_not_by_restore(tmp_path: object) -> None:
    path = tf.train.Checkpoint(a=torch.zeros(2), b=torch.ones(3)).save(os.path.join(tmp_path, "ckpt"))
    target = torch.zeros(2)
    status = tf.train.Checkpoint(a=target, c=torch.zeros(1)).restore(path)
    status.expect_partial()
    status.assert_nontrivial_match()
    with pytest.raises(AssertionError, match=r"\['b'\].*\['c'\]"):
        status.assert_consumed()
    with pytest.raises(AssertionError, match="c"):
        status.assert_existing_objects_matched()


def test_shape_mismatch_raises_naming_both_shapes(tmp_path: object) -> None:
    path = tf.train.Checkpoint(w=torch.zeros(2, 3)).write(os.path.join(tmp_path, "w"))
    with pytest.raises(CheckpointError, match=r"\(2, 3\).*\(3, 2\)"):
        tf.train.Checkpoint(w=torch.zeros(3, 2)).read(path)


def test_restore_of_none_restores_nothing_as_before_any_save() -> None:
    value = torch.tensor([1.0])
    status = tf.train.Checkpoint(v=value).restore(tf.train.latest_checkpoint("/nonexistent/folder"))
    assert float(value) == 1.0
    with pytest.raises(AssertionError):
        status.assert_nontrivial_match()


def test_loading_runs_no_code_from_a_crafted_file(tmp_path: object) -> None:
    class Exploit:
        def __reduce__(self) -> tuple:
            return (os.system, ("touch " + os.path.join(str(tmp_path), "pwned"),))

    prefix = os.path.join(str(tmp_path), "evil")
    with open(prefix + ".ckpt", "wb") as f:
        torch.save({"format": "stratagem.train.Checkpoint/1", "x": Exploit()}, f, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="could run code"):
        tf.train.Checkpoint(x=torch.zeros(1)).restore(prefix)
    assert not os.path.exists(os.path.join(str(tmp_path), "pwned"))


def test_manager_keeps_max_to_keep_and_a_restarted_manager_continues(tmp_path: object) -> None:
    folder = str(tmp_path)
    value = torch.zeros(1)
    checkpoint = tf.train.Checkpoint(value=value)
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=2, checkpoint_name="model")
    for i in range(4):
        value.fill_(float(i))
        manager.save()
    assert manager.checkpoints == [os.path.join(folder, "model-3"), os.path.join(folder, "model-4")]
    assert sorted(os.listdir(folder)) == ["checkpoint", "model-3.ckpt", "model-4.ckpt"]
    index = open(os.path.join(folder, "checkpoint")).read()
    assert 'model_checkpoint_path: "model-4"' in index  # TF's index file, relative paths
    assert tf.train.latest_checkpoint(folder) == os.path.join(folder, "model-4")
    # A new job: the manager takes over the kept checkpoints and restores the latest.
    restored = torch.zeros(1)
    again = tf.train.CheckpointManager(tf.train.Checkpoint(value=restored), folder, max_to_keep=2,
                                       checkpoint_name="model")
    assert again.restore_or_initialize() == os.path.join(folder, "model-4") and float(restored) == 3.0
    again.save(checkpoint_number=10)
    assert again.checkpoints == [os.path.join(folder, "model-4"), os.path.join(folder, "model-10")]
    assert not os.path.exists(os.path.join(folder, "model-3.ckpt"))


def test_latest_checkpoint_is_none_when_the_indexed_checkpoint_is_gone(tmp_path: object) -> None:
    path = tf.train.Checkpoint(v=torch.zeros(1)).save(os.path.join(str(tmp_path), "ckpt"))
    os.unlink(path + ".ckpt")
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


def test_latest_checkpoint_without_index_finds_model_checkpoint_files(tmp_path: object) -> None:
    model = stratagem.Model(torch.nn.Linear(2, 1))
    model.save_weights(os.path.join(str(tmp_path), "ckpt_1.weights.safetensors"))
    assert tf.train.latest_checkpoint(str(tmp_path)) == os.path.join(str(tmp_path), "ckpt_1.weights.safetensors")


def test_an_object_that_cannot_be_saved_is_refused_when_tracked() -> None:
    with pytest.raises(TypeError, match="cannot save thing=object"):
        tf.train.Checkpoint(thing=object())


def test_tf1_optimizer_names_are_keras_optimizers_with_translated_arguments() -> None:
    adam = tf.train.AdamOptimizer(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-7)
    assert isinstance(adam, keras.optimizers.Adam)
    assert (adam.beta_1, adam.beta_2, adam.epsilon) == (0.8, 0.99, 1e-7)
    momentum = tf.train.MomentumOptimizer(0.1, momentum=0.9, use_nesterov=True)
    assert isinstance(momentum, keras.optimizers.SGD) and momentum.momentum == 0.9 and momentum.nesterov
    sgd = tf.train.GradientDescentOptimizer(0.5)
    assert isinstance(sgd, keras.optimizers.SGD) and float(sgd.learning_rate.numpy()) == 0.5
    with pytest.raises(ValueError, match="use_locking"):
        tf.train.GradientDescentOptimizer(0.5, use_locking=True)


def test_saved_model_save_and_load_of_a_keras_model_predict_the_same(tmp_path: object) -> None:
    model = _keras_model(3)
    export_dir = os.path.join(str(tmp_path), "exported")
    tf.saved_model.save(model, export_dir)
    assert tf.saved_model.contains_saved_model(export_dir)
    loaded = tf.saved_model.load(export_dir)
    x = torch.randn(5, 3)
    torch.testing.assert_close(loaded(x), model(x, training=False).detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="signatures"):
        tf.saved_model.save(model, export_dir, signatures={"serving_default": None})


def test_restoring_into_an_unbuilt_keras_model_raises_instead_of_losing_the_values(tmp_path: object) -> None:
    path = tf.train.Checkpoint(model=_keras_model(4)).write(os.path.join(str(tmp_path), "m"))
    unbuilt = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(2)])  # no Input: no weights yet
    with pytest.raises(CheckpointError, match="no weights yet.*call it once"):
        tf.train.Checkpoint(model=unbuilt).read(path)
