"""A Keras functional model with a frozen block under ParameterServerStrategy (Model.fit).

argv: OUT_JSON. Run by the chief and the workers of a PS cluster (TF_CONFIG). Each task
builds the model from its own Keras seed: the chief's values must be the job's. The chief
writes the frozen block's largest change, the head's, the test accuracy and the history.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import stratagem
import keras
from stratagem.datasets import digits

BATCH, EPOCHS, STEPS = 32, 2, 25


def build(seed: int) -> tuple[keras.Model, keras.Model]:
    keras.utils.set_random_seed(seed)
    block = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Flatten()], name="pretrained")
    block.trainable = False  # random weights stand in for pretrained ones
    inputs = keras.Input((28, 28, 1), name="input_1")
    outputs = keras.layers.Dense(10)(block(inputs, training=False))
    return keras.Model(inputs, outputs), block


def main() -> None:
    out = sys.argv[1]
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    x_train = (x_train.astype(np.float32) / 255.0).reshape(-1, 28, 28, 1)
    x_test = (x_test.astype(np.float32) / 255.0).reshape(-1, 28, 28, 1)
    strategy = stratagem.distribute.ParameterServerStrategy()
    with strategy.scope():
        keras_model, block = build(seed=0 if strategy.is_chief else 1 + strategy.task_id)
        model = stratagem.Model(keras_model)
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    initial = {v.path: v.numpy().copy() for v in keras_model.weights}
    history = model.fit({"input_1": x_train}, y_train, batch_size=BATCH, epochs=EPOCHS, steps_per_epoch=STEPS,
                        verbose=0)
    result = model.evaluate({"input_1": x_test}, y_test, batch_size=250, verbose=0, return_dict=True)
    if strategy.is_chief:
        frozen = {v.path for v in block.weights}
        change = {v.path: float(np.abs(v.numpy() - initial[v.path]).max()) for v in keras_model.weights}
        reference, _ = build(seed=0)
        with open(out, "w") as f:
            json.dump({"frozen_change": max(change[p] for p in frozen),
                       "head_change": min(c for p, c in change.items() if p not in frozen),
                       "frozen_equals_chief_seed": all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(
                           block.weights, reference.layers[1].weights)),
                       "evaluate": result, "history": history.history}, f)


if __name__ == "__main__":
    main()
