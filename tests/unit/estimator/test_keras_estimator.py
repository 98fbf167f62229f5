"""model_to_estimator given a compiled Keras 3 model (torch backend), as seed 004 gives tf.keras's:
the compile arguments carry over, and a second Estimator resumes from the checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import stratagem  # first: it selects Keras's torch backend
import keras
from stratagem.data import Dataset

pytestmark = pytest.mark.timeout(120)


def _seed_004_style_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(8, 8, 3), name="input_1")
    x = keras.layers.Conv2D(4, (3, 3), activation="relu")(inputs)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs=inputs, outputs=keras.layers.Dense(3, activation="softmax")(x))


def _compile(model: keras.Model) -> None:
    model.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  metrics=["accuracy"])


def _input_fn() -> Dataset:
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(16, 8, 8, 3)).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[images[:, 0, 0, :].argmax(axis=1)]
    return Dataset.from_tensor_slices(({"input_1": images}, labels)).batch(8)


def test_compiled_keras_model_trains_resumes_and_matches_fit(tmp_path: Path) -> None:
    batches = list(_input_fn())
    input_fn = _input_fn
    first = _seed_004_style_model(seed=1)
    initial = first.get_weights()
    _compile(first)
    stratagem.estimator.model_to_estimator(first, model_dir=str(tmp_path)).train(input_fn, steps=2)
    other = _seed_004_style_model(seed=2)  # other weights: the checkpoint must supply them
    _compile(other)
    estimator = stratagem.estimator.model_to_estimator(other, model_dir=str(tmp_path))
    estimator.train(input_fn, steps=2)
    results = estimator.evaluate(input_fn)
    assert results["global_step"] == 4 and set(results) == {"loss", "accuracy", "global_step"}

    reference_keras = _seed_004_style_model(seed=3)
    reference_keras.set_weights(initial)
    reference = stratagem.Model(reference_keras)
    reference.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adam(learning_rate=0.01))
    reference.fit(batches * 2, epochs=1, verbose=0, shuffle=False)  # each train() restarts the input
    trained = next(iter(estimator._models.values()))[1].module.state_dict()
    for name, value in reference.module.state_dict().items():
        torch.testing.assert_close(trained[name], value, rtol=0, atol=1e-6, msg=name)


def test_uncompiled_keras_model_is_refused_as_tf_does() -> None:
    with pytest.raises(ValueError, match="has not been compiled"):
        stratagem.estimator.model_to_estimator(_seed_004_style_model(seed=0))
