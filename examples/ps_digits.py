"""Asynchronous parameter-server training of a small network on the shipped digits.

Run `stratagem run --ps 1 --workers 2 examples/ps_digits.py`: one server,
two workers and the chief on this host, each with its own TF_CONFIG. Every
task runs this script; the strategy line turns the chief into the coordinator
and the workers into step runners.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import stratagem
from stratagem.datasets import digits


def main() -> None:
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    x_train, x_test = x_train.astype(np.float32) / 255.0, x_test.astype(np.float32) / 255.0
    strategy = stratagem.distribute.ParameterServerStrategy()
    with strategy.scope():
        torch.manual_seed(0)  # the chief's initial values are the ones the servers keep
        model = stratagem.Model(nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)))
        model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=64, epochs=4, steps_per_epoch=60, verbose=2)  # printed by the chief
    result = model.evaluate(x_test, y_test, batch_size=250, verbose=0, return_dict=True)
    if strategy.is_chief:
        steps = stratagem.distribute.ClusterCoordinator(strategy).stats()["workers"]
        print(f"test accuracy {result['accuracy']:.4f}; steps run per worker: "
              f"{ {w: s['closures_run'] for w, s in steps.items()} }")


if __name__ == "__main__":
    main()
