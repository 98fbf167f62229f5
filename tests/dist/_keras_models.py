"""Keras 3 models for the multi-process tests: the seed CNN written with keras layers (channels last).

Importable by spawned workers; importing it imports Keras (on the torch backend, set by
``import stratagem``), so only the Keras tests import it.
"""

from __future__ import annotations

import json
import os

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


def train_tf_seed_cnn(strategy, *, build_seed: int = 0, steps_per_epoch: int | None = None) -> dict:  # noqa: ANN001
    """Seed 001's script as TF writes it: tf.keras model built and compiled in ``strategy.scope()``, fit outside.

    SGD with momentum, a Keras metric object made in the scope and a ``tf.keras.callbacks.Callback`` subclass
    recording its logs. Returns the weights after STEPS steps, the batch losses and epoch logs the callback saw.
    """
    import stratagem.tf as tf

    class Recorder(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.batch_losses: list[float] = []
            self.epoch_logs: list[dict] = []

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.batch_losses.append(logs["loss"])

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            self.epoch_logs.append(dict(logs, model_is_users=self.model is model))

    x, y = images(GLOBAL_BATCH * STEPS)
    with strategy.scope():
        model = tf_seed_cnn(build_seed)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
    recorder = Recorder()
    callbacks = [] if steps_per_epoch else [recorder]  # batch hooks do not run where steps are scheduled elsewhere
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks,
              steps_per_epoch=steps_per_epoch)
    return {"weights": model.get_weights(), "batch_losses": recorder.batch_losses, "epoch_logs": recorder.epoch_logs}


def keras_own_fit_error() -> str | None:
    """The error of a plain ``keras.Model``'s own fit (not through stratagem), or None if it trained."""
    from stratagem.errors import ConfigurationError

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    try:
        model.fit(np.ones((8, 4), np.float32), np.ones((8, 1), np.float32), verbose=0)
    except ConfigurationError as err:
        return str(err)
    return None


def become_tf_config_worker(rank: int, ports: list[int]) -> None:
    """Ends this worker's process group and sets TF_CONFIG for a 2-worker job, as a TF cluster manager would."""
    from stratagem.distribute import collectives, context

    collectives.destroy_process_group()
    context.reset()
    for variable in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(variable, None)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
                                          "task": {"type": "worker", "index": rank}})
