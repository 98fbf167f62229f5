"""Keras 3 models in ``stratagem.Model``, one process: layers, frozen blocks, BatchNormalization, dict inputs,
saving, BackupAndRestore, and Keras loss/metric/optimizer objects in ``compile``.

Keras is imported once for the whole module (its import costs seconds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import stratagem
import keras
from stratagem.errors import ConfigurationError
from stratagem.models.keras_compile import KerasLoss, optimizer_from_keras
from stratagem.models.keras_model import check_torch_backend

pytestmark = pytest.mark.timeout(120)
COLORS = ((220, 40, 40), (40, 200, 40), (40, 40, 220))  # one class per dominant colour


def _image_folder(root: Path, per_class: int = 12, side: int = 16) -> Path:
    rng = np.random.default_rng(0)
    for label, color in enumerate(COLORS):
        (root / f"class_{label}").mkdir(parents=True)
        for index in range(per_class):
            pixels = np.clip(rng.normal(color, 60.0, size=(side, side, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / f"class_{label}" / f"{index}.png")
    return root


def _pretrained_style_model(num_classes: int) -> tuple[keras.Model, keras.Model]:
    """A functional model around a frozen block (random weights stand in for ImageNet's), as transfer learning."""
    keras.utils.set_random_seed(3)
    backbone = keras.Sequential([
        keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.BatchNormalization(), keras.layers.GlobalAveragePooling2D(),
    ], name="backbone")
    backbone.trainable = False
    inputs = keras.Input((16, 16, 3), name="input_1")
    features = backbone(keras.layers.Rescaling(1 / 255.0)(inputs), training=False)
    outputs = keras.layers.Dense(num_classes)(features)
    return keras.Model(inputs, outputs), backbone


def test_frozen_block_stays_bit_identical_while_the_head_learns_an_image_folder(tmp_path: Path) -> None:
    folder = _image_folder(tmp_path / "images")
    train = stratagem.data.image_dataset_from_directory(folder, image_size=(16, 16), batch_size=12, seed=1)
    keras_model, backbone = _pretrained_style_model(len(COLORS))
    model = stratagem.Model(keras_model)
    frozen = {v.path: v.numpy().copy() for v in backbone.weights}
    head = {v.path: v.numpy().copy() for v in keras_model.layers[-1].weights}
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(train, epochs=8, verbose=0)
    for variable in backbone.weights:  # kernel, bias, gamma, beta and the moving statistics
        np.testing.assert_array_equal(variable.numpy(), frozen[variable.path], err_msg=variable.path)
    assert all(np.abs(v.numpy() - head[v.path]).max() > 1e-3 for v in keras_model.layers[-1].weights)
    accuracy = model.evaluate(train, verbose=0, return_dict=True)["accuracy"]
    assert accuracy > 0.6, f"chance is {1 / len(COLORS):.2f}; got {accuracy}"


def test_module_holds_each_weight_once_buffers_for_moving_statistics() -> None:
    keras_model, backbone = _pretrained_style_model(3)
    module = stratagem.Model(keras_model).module
    assert sorted(module.state_dict()) == sorted([
        "conv2d.kernel", "conv2d.bias", "batch_normalization.gamma", "batch_normalization.beta",
        "batch_normalization.moving_mean", "batch_normalization.moving_variance", "dense.kernel", "dense.bias"])
    assert sorted(name for name, _ in module.named_buffers()) == [
        "batch_normalization.moving_mean", "batch_normalization.moving_variance"]
    trainable = sorted(name for name, p in module.named_parameters() if p.requires_grad)
    assert trainable == ["dense.bias", "dense.kernel"]  # the frozen block's weights are parameters without grad
    # the tensors are the Keras variables' own: training one trains the other
    assert module.get_parameter("dense.kernel") is keras_model.layers[-1].kernel.value


def test_batch_normalization_updates_moving_statistics_in_fit_only() -> None:
    keras.utils.set_random_seed(0)
    keras_model = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization(momentum=0.5),
                                    keras.layers.Dropout(0.5), keras.layers.Dense(2)])
    model = stratagem.Model(keras_model)
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(3.0, 1.0, size=(64, 4)).astype(np.float32)
    y = np.zeros((64, 2), np.float32)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    moving_mean = keras_model.layers[0].moving_mean.numpy().copy()
    assert np.all(moving_mean > 1.0), moving_mean  # trained in training mode: towards the data's mean of 3
    first = model.predict(x, batch_size=16, verbose=0)
    model.evaluate(x, y, batch_size=16, verbose=0)
    np.testing.assert_array_equal(keras_model.layers[0].moving_mean.numpy(), moving_mean)
    np.testing.assert_array_equal(model.predict(x, batch_size=16, verbose=0), first)  # no dropout in predict


def test_dict_features_train_evaluate_predict_and_export(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    image = keras.Input((8, 8, 1), name="input_1")
    extra = keras.Input((3,), name="extra")
    merged = keras.layers.Concatenate()([keras.layers.Flatten()(image), extra])
    keras_model = keras.Model({"input_1": image, "extra": extra}, keras.layers.Dense(4)(merged))
    rng = np.random.default_rng(0)
    x = {"input_1": rng.random((40, 8, 8, 1), dtype=np.float32), "extra": rng.random((40, 3), dtype=np.float32)}
    y = rng.integers(0, 4, 40)
    model = stratagem.Model(keras_model)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")])
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    assert set(history.history) == {"loss", "acc"} and history.history["loss"][-1] < history.history["loss"][0]
    logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    expected = keras_model(x, training=False).detach().numpy()
    np.testing.assert_allclose(model.predict(x, batch_size=8, verbose=0), expected, rtol=1e-5, atol=1e-6)
    assert logs["acc"] == pytest.approx(float(np.mean(expected.argmax(axis=1) == y)))
    model.save(tmp_path / "saved")  # keys not in sorted order: metadata.json stores them sorted
    np.testing.assert_allclose(stratagem.models.load_model(tmp_path / "saved").predict(x), expected, rtol=1e-5,
                               atol=1e-6)


def test_seed_004_dict_input_model_exports_and_loads(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3), name="input_1")
    hidden = keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 3, activation="relu")(inputs))
    keras_model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(hidden)))
    x = {"input_1": np.random.default_rng(0).random((24, 8, 8, 3), dtype=np.float32)}
    model = stratagem.Model(keras_model)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, np.arange(24) % 2, batch_size=8, verbose=0)
    predictions = model.predict(x, batch_size=8, verbose=0)
    model.save(tmp_path / "saved")
    restored = stratagem.models.load_model(tmp_path / "saved")
    np.testing.assert_allclose(restored.predict(x), predictions, rtol=1e-5, atol=1e-6)


def test_weights_load_into_a_second_build_whatever_keras_named_its_layers(tmp_path: Path) -> None:
    from tests.dist._keras_models import images, seed_cnn

    x, y = images(32)
    model = stratagem.Model(seed_cnn(0))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=16, verbose=0)
    model.save_weights(str(tmp_path / "w.safetensors"))
    other = stratagem.Model(seed_cnn(7))  # Keras names its layers sequential_1/conv2d_1/...: not the same paths
    other.load_weights(str(tmp_path / "w.safetensors"))
    np.testing.assert_array_equal(other.predict(x, verbose=0), model.predict(x, verbose=0))


class _CountBatches(stratagem.callbacks.Callback):
    batches = 0

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        self.batches += 1


def test_backup_and_restore_resumes_to_the_uninterrupted_weights(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((32, 6, 6, 1), dtype=np.float32), rng.integers(0, 3, 32)

    class StopAt(stratagem.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if self.epoch == 1 and batch == 1:
                raise KeyboardInterrupt("simulated kill")

    def run(callbacks: list) -> dict[str, torch.Tensor]:
        keras.utils.set_random_seed(0)
        model = stratagem.Model(keras.Sequential([
            keras.Input((6, 6, 1)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
            keras.layers.Flatten(), keras.layers.Dense(3)]))
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        torch.manual_seed(5)
        model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=callbacks)
        return {k: v.clone() for k, v in model.module.state_dict().items()}

    expected = run([])
    with pytest.raises(KeyboardInterrupt):
        run([stratagem.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=3), StopAt()])
    counter = _CountBatches()
    resumed = run([stratagem.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=3), counter])
    # killed in step 6 before its backup (BackupAndRestore runs last): the rerun resumes after step 3
    assert counter.batches == 12 - 3, "the rerun must resume from the backup, not start over"
    for name, value in expected.items():  # moving statistics included
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=1e-6, msg=name)


def test_keras_optimizer_becomes_stratagems_with_its_hyperparameters() -> None:
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    optimizer = optimizer_from_keras(keras.optimizers.SGD(learning_rate=schedule, momentum=0.9, nesterov=True,
                                                          clipnorm=1.0))
    assert isinstance(optimizer, stratagem.optimizers.SGD)
    assert (optimizer.momentum, optimizer.nesterov, optimizer.clipnorm) == (0.9, True, 1.0)
    assert optimizer._schedule(20) == pytest.approx(0.025)
    adamw = optimizer_from_keras(keras.optimizers.AdamW(learning_rate=2e-3, weight_decay=0.01, beta_2=0.98))
    assert isinstance(adamw, stratagem.optimizers.AdamW)
    assert (float(adamw.learning_rate), adamw.weight_decay, adamw.beta_2) == (2e-3, 0.01, 0.98)
    with pytest.raises(ValueError, match="has no Ftrl.*Received: optimizer=Ftrl"):
        optimizer_from_keras(keras.optimizers.Ftrl())
    with pytest.raises(ValueError, match=r"use_ema.*Received"):
        optimizer_from_keras(keras.optimizers.Adam(use_ema=True))


def test_keras_loss_object_gives_keras_numbers() -> None:
    rng = np.random.default_rng(0)
    y_pred = torch.from_numpy(rng.normal(size=(6, 5)).astype(np.float32))
    y_true = torch.from_numpy(rng.integers(0, 5, 6))
    for keras_loss in (keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       keras.losses.CategoricalFocalCrossentropy(from_logits=True)):
        labels = y_true if "Sparse" in type(keras_loss).__name__ else torch.nn.functional.one_hot(y_true, 5)
        per_example = KerasLoss(keras_loss).per_example(labels, y_pred)
        assert per_example.shape == (6,)
        assert float(per_example.mean()) == pytest.approx(float(keras_loss(labels, y_pred)), rel=1e-6)


def test_unbuilt_keras_model_raises_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"no weights yet.*call it once on a batch"):
        stratagem.Model(keras.Sequential([keras.layers.Dense(2)]))


def test_keras_on_another_backend_is_refused_with_the_fix() -> None:
    class OtherBackend:  # keras imported with KERAS_BACKEND=tensorflow (no other backend is installed here)
        class backend:  # noqa: N801
            @staticmethod
            def backend() -> str:
                return "tensorflow"

    with pytest.raises(ConfigurationError, match=r"'tensorflow' backend.*KERAS_BACKEND=torch.*Received:"):
        check_torch_backend(OtherBackend, "Sequential 'sequential'")
    check_torch_backend(keras, "this model")  # the backend import stratagem set: no error
    assert keras.backend.backend() == "torch"


class _Subclassed(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(2)

    def call(self, inputs: object, training: bool = False) -> object:
        return self.out(self.hidden(inputs))


def test_subclassed_model_trains_once_built() -> None:
    keras.utils.set_random_seed(0)
    keras_model = _Subclassed()
    with pytest.raises(ValueError, match=r"no weights yet.*keras_model\(x\[:1\]\)"):
        stratagem.Model(keras_model)
    x = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    keras_model(x[:1])  # a subclassed model creates its weights on its first call
    model = stratagem.Model(keras_model)
    assert sorted(model.module.state_dict()) == ["dense.bias", "dense.kernel", "dense_1.bias", "dense_1.kernel"]
    y = (x[:, 0] > 0).astype(np.int64)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=8, epochs=5, verbose=0)
    assert history.history["accuracy"][-1] > 0.8, history.history
