"""Fashion-MNIST from local IDX files, shaped like ``keras.datasets.fashion_mnist``.

``load_data(path)`` reads the four standard Fashion-MNIST files (the ones
Keras downloads) from a directory; nothing here touches the network. The file
handling is shared with ``mnist.py`` in ``_idx_pair.py``.
"""

from __future__ import annotations

import os

import numpy as np

from stratagem.datasets import _idx_pair

__all__ = ["load_data"]

_SOURCE = (
    "https://github.com/zalandoresearch/fashion-mnist (the data/fashion folder) "
    "or https://storage.googleapis.com/tensorflow/tf-keras-datasets/, where "
    "keras.datasets.fashion_mnist downloads them"
)


def load_data(
    path: str | os.PathLike[str],
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Loads Fashion-MNIST from a local directory of IDX files.

    Returns what ``keras.datasets.fashion_mnist.load_data()`` returns, but
    reads the files from `path` instead of downloading them. The directory
    must hold ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
    ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz``; each may
    also be un-gzipped (same name without ``.gz``).

    Args:
        path: The directory that holds the four files.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: x uint8 of shape
        (N, 28, 28), y int64 class ids 0-9 (0 is T-shirt/top, 9 ankle boot).
        The full dataset has 60,000 training and 10,000 test images.

    Raises:
        FileNotFoundError: If the directory or any of the four files is missing.
        ValueError: If a file is not valid IDX or a split has different
            numbers of images and labels.

    Example:
        ```python
        from stratagem.datasets import fashion_mnist

        (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data(
            "data/fashion"
        )
        x_train = x_train.astype("float32") / 255.0
        ```
    """
    return _idx_pair.load_idx_splits(path, dataset_name="Fashion-MNIST", source=_SOURCE)
