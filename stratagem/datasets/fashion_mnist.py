"""Fashion-MNIST from local IDX files, shaped like ``keras.datasets.fashion_mnist``.

``load_data(path)`` reads the four files Keras downloads from a directory (MNIST's names and layout); no network.
"""

from __future__ import annotations

import os

from stratagem.datasets.mnist import Splits, load_idx_splits

__all__ = ["load_data"]

_SOURCE = (
    "https://github.com/zalandoresearch/fashion-mnist (the data/fashion folder) "
    "or https://storage.googleapis.com/tensorflow/tf-keras-datasets/, where keras.datasets.fashion_mnist downloads them"
)


def load_data(path: str | os.PathLike[str]) -> Splits:
    """Loads Fashion-MNIST from a local directory of IDX files, as ``mnist.load_data`` loads MNIST.

    Names, errors and shapes as ``mnist.load_data``; y holds class ids 0-9 (0 is T-shirt/top, 9 ankle boot).

    Example:
        ```python
        from stratagem.datasets import fashion_mnist

        (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data("data/fashion")
        ```
    """
    return load_idx_splits(path, dataset_name="Fashion-MNIST", source=_SOURCE)
