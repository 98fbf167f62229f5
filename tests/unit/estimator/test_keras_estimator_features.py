"""model_to_estimator feeds a features dict to a functional Keras model's inputs by input layer name (TF's rule),
which Keras 3 itself cannot do for an unnamed ``Input`` (layer "input_layer", tensor "keras_tensor")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import stratagem  # first: it selects Keras's torch backend
import keras
from stratagem.data import Dataset

pytestmark = pytest.mark.timeout(120)

_RNG = np.random.default_rng(0)
_A = _RNG.uniform(size=(8, 3)).astype(np.float32)
_B = _RNG.uniform(size=(8, 2)).astype(np.float32)
_Y = _RNG.uniform(size=(8, 1)).astype(np.float32)


def _compiled(model: keras.Model) -> keras.Model:
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(learning_rate=0.1))
    return model


def _predictions(model: keras.Model, features: dict[str, np.ndarray], model_dir: Path) -> np.ndarray:
    estimator = stratagem.estimator.model_to_estimator(model, model_dir=str(model_dir))
    estimator.train(lambda: Dataset.from_tensor_slices((features, _Y)).batch(4), steps=2)
    return np.stack(list(estimator.predict(lambda: Dataset.from_tensor_slices(features).batch(4))))


def test_unnamed_input_takes_its_layer_name_and_keras2_name(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(3,))  # unnamed: Keras 3 calls the layer input_layer[_N]
    model = _compiled(keras.Model(inputs, keras.layers.Dense(1)(inputs)))
    layer_name = model.input_spec[0].name
    assert layer_name.startswith("input_layer") and inputs.name != layer_name  # the Keras 3 mismatch
    with pytest.raises(ValueError):
        model({layer_name: torch.from_numpy(_A)})  # what the Estimator must not pass on as is
    by_layer_name = _predictions(model, {layer_name: _A}, tmp_path / "a")
    torch.testing.assert_close(torch.from_numpy(by_layer_name), model(torch.from_numpy(_A)).detach())

    seed_style = keras.Input(shape=(3,), name="input_layer")  # the first Input of a script: "input_1" in Keras 2
    model = _compiled(keras.Model(seed_style, keras.layers.Dense(1)(seed_style)))
    by_keras2_name = _predictions(model, {"input_1": _A}, tmp_path / "b")
    torch.testing.assert_close(torch.from_numpy(by_keras2_name), model(torch.from_numpy(_A)).detach())


def test_two_inputs_take_keys_in_model_order_and_ignore_extra_keys(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    a, b = keras.Input(shape=(3,), name="zeta"), keras.Input(shape=(2,), name="alpha")  # sorted keys would swap them
    model = _compiled(keras.Model([a, b], keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))))
    features = {"alpha": _B, "zeta": _A, "unused": _Y}
    got = _predictions(model, features, tmp_path)
    torch.testing.assert_close(torch.from_numpy(got), model([torch.from_numpy(_A), torch.from_numpy(_B)]).detach())


def test_missing_input_key_raises_naming_expected_keys(tmp_path: Path) -> None:
    inputs = keras.Input(shape=(3,), name="pixels")
    model = _compiled(keras.Model(inputs, keras.layers.Dense(1)(inputs)))
    estimator = stratagem.estimator.model_to_estimator(model, model_dir=str(tmp_path))
    with pytest.raises(KeyError, match=r"Expected keys: \['pixels'\].*Received: keys=\['image'\]"):
        estimator.train(lambda: Dataset.from_tensor_slices(({"image": _A}, _Y)).batch(4), steps=1)


def test_model_built_on_a_dict_gets_the_dict_unchanged(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    a, b = keras.Input(shape=(3,), name="a"), keras.Input(shape=(2,), name="b")
    model = _compiled(keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))))
    got = _predictions(model, {"b": _B, "a": _A}, tmp_path)
    expected = model({"a": torch.from_numpy(_A), "b": torch.from_numpy(_B)}).detach()
    torch.testing.assert_close(torch.from_numpy(got), expected)
