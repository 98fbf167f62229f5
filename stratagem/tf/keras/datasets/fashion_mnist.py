"""``tf.keras.datasets.fashion_mnist``: ``load_data()`` from Keras's cache folder ``fashion-mnist/``."""

from __future__ import annotations

from stratagem.datasets.keras_cache import Splits, load_fashion_mnist

__all__ = ["load_data"]


def load_data() -> Splits:
    """``((x_train, y_train), (x_test, y_test))``: uint8, 60,000 and 10,000 images (28x28), as Keras's.

    A file neither cached nor downloadable raises ``FileNotFoundError`` saying where to put it.
    """
    return load_fashion_mnist()
