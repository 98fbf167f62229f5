"""tf.keras models train through stratagem.Model's loop as written: Sequential, functional, subclassed; saving; state.

One process (the default strategy). The multi-replica equivalence is tests/dist/test_tf_keras_equivalence.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import stratagem
import stratagem.tf as tf
from tests.dist._keras_models import images, train_seed_cnn


def _cnn(seed: int = 0) -> tf.keras.Model:
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.Input((28, 28, 1)), tf.keras.layers.Conv2D(4, 3, activation="relu"),
                                tf.keras.layers.MaxPooling2D(), tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])


def _compiled(model: tf.keras.Model) -> tf.keras.Model:
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_tf_keras_sequential_trains_as_the_wrapped_keras_model_does() -> None:
    # The same model, data and optimizer through stratagem.Model(keras_model): the facade adds no second loop.
    from tests.dist._keras_models import GLOBAL_BATCH, STEPS, seed_cnn, tf_seed_cnn

    x, y = images(GLOBAL_BATCH * STEPS)
    model = _compiled(tf_seed_cnn(0))
    for ours, wrapped in zip(model.get_weights(), seed_cnn(0).get_weights()):
        np.testing.assert_array_equal(ours, wrapped)  # the same start
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, shuffle=False, verbose=0)
    expected = train_seed_cnn("sgd")
    assert isinstance(model, tf.keras.Sequential) and isinstance(model, tf.keras.Model)
    for variable, name in zip(model.weights, ["conv2d.kernel", "conv2d.bias", "dense.kernel", "dense.bias",
                                              "dense_1.kernel", "dense_1.bias"]):
        np.testing.assert_allclose(variable.numpy(), expected[name], rtol=0, atol=1e-6, err_msg=name)
    assert len(history.history["loss"]) == 1 and 0.0 <= history.history["accuracy"][0] <= 1.0


def test_functional_and_subclassed_models_train_and_report_keras_state() -> None:
    x, y = images(64)
    inputs = tf.keras.Input((28, 28, 1))
    functional = tf.keras.Model(inputs, tf.keras.layers.Dense(10)(tf.keras.layers.Flatten()(inputs)))

    class Subclassed(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.flatten, self.dense = tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)

        def call(self, inputs: torch.Tensor) -> torch.Tensor:
            return self.dense(self.flatten(inputs))

    subclassed = Subclassed()
    for model in (functional, subclassed):
        _compiled(model)
        before = [w.copy() for w in model.get_weights()] if model.built else None
        model.fit(x, y, batch_size=16, epochs=2, verbose=0)  # the subclassed model builds on the first rows
        assert model.built and len(model.trainable_variables) == 2
        if before is not None:
            assert not np.allclose(before[0], model.get_weights()[0])
        assert model.optimizer.learning_rate == pytest.approx(0.05)
        model.optimizer.learning_rate = 0.01  # what LearningRateScheduler does: the step uses it
        assert model.optimizer.lr.numpy() == pytest.approx(0.01)
        loss, accuracy = model.evaluate(x, y, verbose=0)
        assert np.isfinite(loss) and 0.0 <= accuracy <= 1.0
        assert model.predict(x[:5], verbose=0).shape == (5, 10)
    assert type(functional).__name__ == "Functional" and isinstance(functional, tf.keras.Model)


def test_subclass_calling_super_with_inputs_and_outputs_becomes_functional_alone() -> None:
    class FromGraph(tf.keras.Model):
        def __init__(self) -> None:
            inputs = tf.keras.Input((3,))
            super().__init__(inputs, tf.keras.layers.Dense(2)(inputs))

    model = FromGraph()
    assert model.built and model(np.ones((1, 3), np.float32)).shape == (1, 2)
    # tf.keras.Model itself stays a plain model: a later subclass is not made functional.
    assert tf.keras.Model.__bases__[-1] is stratagem.tf.keras.Model.__bases__[-1]
    assert not isinstance(tf.keras.Sequential([tf.keras.Input((3,))]), type(model).__bases__[0].__bases__[-1])


def test_keras_and_stratagem_files_round_trip(tmp_path: Path) -> None:
    x, y = images(32)
    model = _compiled(_cnn())
    model.fit(x, y, batch_size=16, verbose=0)
    expected = model.predict(x, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = tf.keras.models.load_model(tmp_path / "model.keras")
    assert isinstance(loaded, tf.keras.Sequential) and loaded.optimizer is not None  # compiled from the file
    np.testing.assert_allclose(loaded.predict(x, verbose=0), expected, rtol=0, atol=1e-6)
    model.save(tmp_path / "saved")  # a folder, as TF's SavedModel: stratagem's export
    np.testing.assert_allclose(tf.keras.models.load_model(tmp_path / "saved").predict(x), expected, atol=1e-5)
    for path in (tmp_path / "w.weights.h5", tmp_path / "ckpt" / "weights"):
        model.save_weights(path)
        other = _compiled(_cnn(seed=1))
        other.load_weights(path)
        np.testing.assert_allclose(other.predict(x, verbose=0), expected, rtol=0, atol=1e-6, err_msg=str(path))
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"


def test_summary_prints_keras_table(capsys: pytest.CaptureFixture[str]) -> None:
    _compiled(_cnn()).summary()
    out = capsys.readouterr().out
    assert "(Conv2D)" in out and "Total params: 6,810" in out


def test_loss_weights_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="loss_weights is not implemented"):
        _cnn().compile(optimizer="sgd", loss="mse", loss_weights=[0.5])


def test_model_to_estimator_trains_the_tf_keras_model_as_compiled(tmp_path: Path) -> None:
    x, y = images(32)
    model = _compiled(_cnn())
    estimator = tf.keras.estimator.model_to_estimator(keras_model=model, model_dir=str(tmp_path))

    def input_fn() -> stratagem.data.Dataset:
        return stratagem.data.Dataset.from_tensor_slices((x, y)).batch(16)

    estimator.train(input_fn, steps=2)
    results = estimator.evaluate(input_fn)
    assert results["global_step"] == 2 and set(results) == {"loss", "accuracy", "global_step"}
