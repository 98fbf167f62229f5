"""Keras 3 models for the multi-process tests: the seed CNN written with keras layers (channels last).

Importable by spawned workers; importing it imports Keras (on the torch backend, set by
``import stratagem``), so only the Keras tests import it.
"""

from __future__ import annotations

import numpy as np

import stratagem  # noqa: F401  (sets KERAS_BACKEND=torch before Keras is imported)
import keras

GLOBAL_BATCH = 16
STEPS = 20


def seed_cnn(seed: int = 0) -> keras.Model:
    """Seed 001's CNN as its users write it: keras.Sequential, 28x28x1 images, channels last."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def tf_seed_cnn(seed: int = 0) -> keras.Model:
    """``seed_cnn`` written with ``stratagem.tf.keras`` (``tf.keras.Sequential``): it trains through stratagem itself."""
    import stratagem.tf as tf

    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def images(num_samples: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28, 1) in [0, 1] and labels a CNN can learn (the brightest of ten bands)."""
    rng = np.random.default_rng(seed)
    x = rng.random((num_samples, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, num_samples)
    for row, label in enumerate(labels):
        x[row, 2 + 2 * label: 4 + 2 * label] += 1.0
    return x / 2.0, labels.astype(np.int64)


def train_seed_cnn(optimizer: str, *, build_seed: int = 0) -> dict[str, np.ndarray]:
    """STEPS steps of the Keras seed CNN on GLOBAL_BATCH in the current strategy; its weights after."""
    x, y = images(GLOBAL_BATCH * STEPS)
    model = stratagem.Model(seed_cnn(build_seed))
    keras_optimizer = keras.optimizers.SGD(0.05, momentum=0.9) if optimizer == "sgd" else keras.optimizers.Adam(1e-3)
    model.compile(optimizer=keras_optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return {k: v.detach().cpu().numpy().copy() for k, v in model.module.state_dict().items()}


def train_frozen_block(seed: int) -> dict[str, dict[str, np.ndarray]]:
    """A functional model around a frozen block, trained with AdamW (weight decay) and a BatchNormalization head.

    Returns the frozen block's weights before and after, and the head's BatchNormalization statistics.
    """
    keras.utils.set_random_seed(seed)
    block = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(4, 3, strides=2), keras.layers.Flatten()],
                             name="pretrained")
    block.trainable = False
    inputs = keras.Input((28, 28, 1), name="input_1")
    normalized = keras.layers.BatchNormalization(momentum=0.5)(block(inputs, training=False))
    keras_model = keras.Model(inputs, keras.layers.Dense(10)(normalized))
    model = stratagem.Model(keras_model)
    model.compile(optimizer=keras.optimizers.AdamW(1e-2, weight_decay=0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = {k: v.detach().numpy().copy() for k, v in model.module.state_dict().items() if k.startswith("conv2d.")}
    x, y = images(GLOBAL_BATCH * 6)
    # The first half of every global batch (replica 0's share on two replicas) is dark, the second bright.
    half = GLOBAL_BATCH // 2
    bright = (np.arange(len(x)) % GLOBAL_BATCH) >= half
    x = np.where(bright[:, None, None, None], 0.5 + 0.5 * x, 0.5 * x).astype(np.float32)
    model.fit({"input_1": x}, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    state = {k: v.detach().numpy().copy() for k, v in model.module.state_dict().items()}
    features = block(x, training=False).detach().numpy()
    return {"before": before, "after": {k: state[k] for k in before},
            "moving_mean": state["batch_normalization.moving_mean"],
            "bright_minus_dark": features[bright].mean(axis=0) - features[~bright].mean(axis=0)}
