"""MNIST from local IDX files, in the shape ``keras.datasets.mnist`` returns.

``load_data(path)`` reads the four standard MNIST IDX files from a directory;
nothing here touches the network. Unlike Keras, which downloads one
``mnist.npz``, `path` is a directory of IDX files. The file handling is shared
with ``fashion_mnist.py`` in ``_idx_pair.py``; for 5,000 real digits with no
files to fetch, see ``digits.py``.
"""

from __future__ import annotations

import os

import numpy as np

from stratagem.datasets import _idx_pair

__all__ = ["load_data"]

_SOURCE = (
    "https://yann.lecun.com/exdb/mnist/ or a mirror such as "
    "https://ossci-datasets.s3.amazonaws.com/mnist/"
)


def load_data(
    path: str | os.PathLike[str],
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Loads MNIST from a local directory of IDX files.

    Returns what ``keras.datasets.mnist.load_data()`` returns, but reads the
    files from `path` instead of downloading them. The directory must hold
    ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
    ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz``; each may
    also be un-gzipped (same name without ``.gz``).

    Args:
        path: The directory that holds the four files.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: x uint8 of shape
        (N, 28, 28), y int64 digits 0-9. The full dataset has 60,000 training
        and 10,000 test images.

    Raises:
        FileNotFoundError: If the directory or any of the four files is missing.
        ValueError: If a file is not valid IDX or a split has different
            numbers of images and labels.

    Example:
        ```python
        from stratagem.datasets import mnist

        (x_train, y_train), (x_test, y_test) = mnist.load_data("data/mnist")
        x_train = x_train.astype("float32") / 255.0
        ```
    """
    return _idx_pair.load_idx_splits(path, dataset_name="MNIST", source=_SOURCE)
