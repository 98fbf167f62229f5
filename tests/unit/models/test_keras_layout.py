"""Channels-last Keras convolution and pooling without layout copies (``install_channels_last_layout``).

Every check runs the same model on the same weights twice: through Keras's own
``_transpose_spatial_inputs`` (the copy into NCHW order, kept as ``__wrapped__``) and
through stratagem's channels-last view, and compares outputs and gradients within 1e-6.
Keras is imported once for the whole module (its import costs seconds).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import stratagem
import keras
from keras.src.backend.torch import nn as keras_torch_nn
from stratagem.models.keras_internals import install_channels_last_layout

pytestmark = pytest.mark.timeout(120)
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}


@contextlib.contextmanager
def _keras_own_layout() -> Iterator[None]:
    """Keras's own path (NCHW copies) inside the block; stratagem's view again after it."""
    install_channels_last_layout()
    view = keras_torch_nn._transpose_spatial_inputs
    keras_torch_nn._transpose_spatial_inputs = view.__wrapped__
    try:
        yield
    finally:
        keras_torch_nn._transpose_spatial_inputs = view


def _outputs_and_gradients(model: Any, x: np.ndarray, *, training: bool) -> list[torch.Tensor]:
    """The model's output, and the gradients of a weighted sum of it for the input and every trainable weight."""
    inputs = torch.tensor(x, requires_grad=True)
    outputs = model(inputs, training=training)
    weights = torch.linspace(-1.0, 1.0, outputs.numel()).reshape(outputs.shape)
    variables = [v.value for v in model.trainable_variables]
    grads = torch.autograd.grad((outputs * weights).sum(), [inputs, *variables])
    return [outputs.detach(), *grads]


def _assert_same_on_both_paths(model: Any, x: np.ndarray, *, training: bool = True) -> None:
    install_channels_last_layout()
    fast = _outputs_and_gradients(model, x, training=training)
    with _keras_own_layout():
        reference = _outputs_and_gradients(model, x, training=training)
    assert len(fast) == len(reference)
    for index, (got, expected) in enumerate(zip(fast, reference)):
        assert got.shape == expected.shape, index
        torch.testing.assert_close(got, expected, **TOLERANCE, msg=lambda m, i=index: f"tensor {i}: {m}")


def _images(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_view_of_nhwc_input_shares_its_memory_and_is_channels_last() -> None:
    install_channels_last_layout()
    nhwc = torch.randn(4, 9, 7, 5)
    view = keras_torch_nn._transpose_spatial_inputs(nhwc)
    assert view.shape == (4, 5, 9, 7)
    assert view.data_ptr() == nhwc.data_ptr()  # no copy
    assert view.is_contiguous(memory_format=torch.channels_last)
    ndhwc = torch.randn(2, 3, 4, 5, 6)
    assert keras_torch_nn._transpose_spatial_inputs(ndhwc).is_contiguous(memory_format=torch.channels_last_3d)
    sequence = torch.randn(2, 10, 3)  # 1-D: no channels-last format, Keras's own copy
    assert keras_torch_nn._transpose_spatial_inputs(sequence).is_contiguous()


def test_install_is_idempotent() -> None:
    install_channels_last_layout()
    once = keras_torch_nn._transpose_spatial_inputs
    install_channels_last_layout()
    assert keras_torch_nn._transpose_spatial_inputs is once
    assert not hasattr(once.__wrapped__, "__wrapped__")  # wrapped once, around Keras's own


def test_seed_cnn_sequential_matches_keras_own_path() -> None:
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    _assert_same_on_both_paths(model, _images(8, 28, 28, 1))


def test_functional_model_of_every_patched_layer_matches_keras_own_path() -> None:
    keras.utils.set_random_seed(2)
    inputs = keras.Input((15, 14, 3))
    x = keras.layers.Conv2D(6, 3, strides=2, padding="same")(inputs)  # asymmetric "same" padding
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("gelu")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu6")(x)
    x = keras.layers.SeparableConv2D(5, 2, dilation_rate=1, activation="elu")(x)
    a = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    b = keras.layers.AveragePooling2D(2, strides=1, padding="same")(x)
    a = keras.layers.LeakyReLU()(keras.layers.Conv2DTranspose(5, 3, strides=2, padding="same")(a))
    features = [keras.layers.GlobalAveragePooling2D()(a), keras.layers.GlobalMaxPooling2D()(b),
                keras.layers.Flatten()(b)]
    outputs = keras.layers.Dense(4)(keras.layers.Concatenate()(features))
    model = keras.Model(inputs, outputs)
    _assert_same_on_both_paths(model, _images(5, 15, 14, 3), training=True)
    _assert_same_on_both_paths(model, _images(5, 15, 14, 3), training=False)


def test_3d_and_1d_layers_match_keras_own_path() -> None:
    keras.utils.set_random_seed(3)
    volume = keras.Input((6, 7, 8, 2))
    x = keras.layers.Conv3D(4, 3, padding="same", activation="relu")(volume)
    x = keras.layers.MaxPooling3D(2)(x)
    x = keras.layers.AveragePooling3D(2, padding="same")(x)
    volume_model = keras.Model(volume, keras.layers.Dense(3)(keras.layers.Flatten()(x)))
    _assert_same_on_both_paths(volume_model, _images(2, 6, 7, 8, 2))
    sequence = keras.Input((12, 3))
    y = keras.layers.Conv1D(5, 3, activation="relu")(sequence)
    y = keras.layers.MaxPooling1D(2)(y)
    sequence_model = keras.Model(sequence, keras.layers.Dense(2)(keras.layers.Flatten()(y)))
    _assert_same_on_both_paths(sequence_model, _images(3, 12, 3))


def _train_seed_cnn(steps: int) -> list[np.ndarray]:
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((12, 12, 1)), keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.MaxPooling2D(),
                              keras.layers.Flatten(), keras.layers.Dense(5)])
    wrapped = stratagem.Model(model)
    wrapped.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = _images(16 * steps, 12, 12, 1)
    y = np.arange(16 * steps) % 5
    wrapped.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    return [np.asarray(w) for w in model.get_weights()]


def test_training_through_stratagem_gives_keras_own_weights() -> None:
    install_channels_last_layout()
    fast = _train_seed_cnn(steps=3)
    with _keras_own_layout():
        reference = _train_seed_cnn(steps=3)
    assert [w.shape for w in fast] == [w.shape for w in reference]  # the same variables: checkpoints unchanged
    for got, expected in zip(fast, reference):
        np.testing.assert_allclose(got, expected, **TOLERANCE)


def test_keras_module_installs_the_view() -> None:
    view = keras_torch_nn._transpose_spatial_inputs
    keras_torch_nn._transpose_spatial_inputs = getattr(view, "__wrapped__", view)
    try:
        model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3), keras.layers.Flatten()])
        stratagem.Model(model)
        assert getattr(keras_torch_nn._transpose_spatial_inputs, "_stratagem_channels_last", False)
    finally:
        keras_torch_nn._transpose_spatial_inputs = view


def test_import_of_tf_keras_installs_the_view() -> None:
    # A fresh interpreter: in this one Keras's module was patched by the tests above.
    code = ("import stratagem.tf as tf; tf.keras.layers; from keras.src.backend.torch import nn; "
            "print(getattr(nn._transpose_spatial_inputs, '_stratagem_channels_last', False))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"
