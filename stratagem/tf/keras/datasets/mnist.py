"""``tf.keras.datasets.mnist``: ``load_data()`` from Keras's cache file ``mnist.npz``."""

from __future__ import annotations

from stratagem.datasets.keras_cache import Splits, load_mnist

__all__ = ["load_data"]


def load_data(path: str = "mnist.npz") -> Splits:
    """``((x_train, y_train), (x_test, y_test))``: uint8 arrays, 60,000 and 10,000 digits (28x28), as Keras's.

    Args:
        path: The file name in Keras's cache folder (``$KERAS_HOME/datasets``, ``~/.keras/datasets``).

    Raises:
        FileNotFoundError: If the file is not cached and cannot be downloaded (the message says where to put it).
    """
    return load_mnist(path)
