"""Seed 003's ParameterServerStrategy fit on a ``stratagem.data`` Dataset, with the "accuracy" metric.

argv: OUT_JSON. Run by the chief and the workers of a PS cluster (TF_CONFIG). The input is a
Dataset of (x, y) batches repeated forever, as TF's guide feeds ``model.fit`` under a PS strategy;
it failed in the accuracy metric ('numpy.ndarray' object has no attribute 'long'). The chief
writes the history.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from torch import nn

import stratagem

BATCH, EPOCHS, STEPS = 32, 3, 20


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype(np.float32)
    return x, (x[:, :4].argmax(axis=1)).astype(np.int64)  # four classes a linear model separates


def main() -> None:
    strategy = stratagem.distribute.ParameterServerStrategy()
    with strategy.scope():
        torch.manual_seed(0)
        model = stratagem.Model(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
        model.compile(optimizer=stratagem.optimizers.Adam(0.02),
                      loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    x, y = data()
    dataset = stratagem.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=1).batch(BATCH).repeat()
    history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0)
    if strategy.is_chief:
        with open(sys.argv[1], "w") as out:
            json.dump(history.history, out)


if __name__ == "__main__":
    main()
