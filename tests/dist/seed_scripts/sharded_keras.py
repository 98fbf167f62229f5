"""Seed 001's Keras 3 CNN under ShardedDataParallelStrategy, launched with ``stratagem run -n 2``.

argv: OUT_DIR. The ranks train ``tests.dist._keras_models``' seed CNN as ``train_seed_cnn``
does (Adam, the global batch, no shuffle) and rank 0 writes the whole weights
(``weights.npz``) and the history (``history.json``). A second model with
BatchNormalization checks that the moving statistics a sharded call updates are kept.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import stratagem
import keras
from tests.dist._keras_models import GLOBAL_BATCH, STEPS, images, seed_cnn


def main() -> None:
    out = Path(sys.argv[1])
    strategy = stratagem.distribute.ShardedDataParallelStrategy()
    x, y = images(GLOBAL_BATCH * STEPS)
    with strategy.scope():
        model = stratagem.Model(seed_cnn(0))
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    weights = {k.removeprefix("module."): v.numpy() for k, v in strategy.full_state_dict(model.module).items()}

    with strategy.scope():
        keras.utils.set_random_seed(0)
        normalized = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(), keras.layers.Dense(4),
                                       keras.layers.BatchNormalization(), keras.layers.Dense(10)])
        bn_model = stratagem.Model(normalized)
        bn_model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    bn_model.fit(x[:64], y[:64], batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    moving_mean = normalized.layers[-2].moving_mean.numpy()
    if strategy.is_chief:
        np.savez(out / "weights.npz", **weights)
        (out / "history.json").write_text(json.dumps(
            {**history.history, "moving_mean_max": float(np.abs(moving_mean).max())}))


if __name__ == "__main__":
    main()
