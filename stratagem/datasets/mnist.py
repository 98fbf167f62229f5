"""MNIST from local IDX files, in the shape ``keras.datasets.mnist`` returns; the loader of both IDX datasets.

``load_data(path)`` reads the four standard IDX files from a directory (Keras downloads one ``mnist.npz``); no network.
Fashion-MNIST has the same file names, so ``fashion_mnist`` and ``keras_cache`` read theirs with ``load_idx_splits``.
"""

from __future__ import annotations

import os

import numpy as np

from stratagem.datasets import idx

__all__ = ["load_data"]

Splits = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]  # ((x_train, y_train), (x_test, y_test))

_SOURCE = "https://yann.lecun.com/exdb/mnist/ or a mirror such as https://ossci-datasets.s3.amazonaws.com/mnist/"


def load_data(path: str | os.PathLike[str]) -> Splits:
    """Loads MNIST from a local directory of IDX files.

    ``keras.datasets.mnist.load_data()``'s result from ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
    ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz`` in `path` (each may be un-gzipped).

    Args:
        path: The directory that holds the four files.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: x uint8 (N, 28, 28), y int64 digits 0-9 (60,000 and 10,000).

    Raises:
        FileNotFoundError: If the directory or any of the four files is missing.
        ValueError: If a file is not valid IDX or a split has different numbers of images and labels.

    Example:
        ```python
        from stratagem.datasets import mnist

        (x_train, y_train), (x_test, y_test) = mnist.load_data("data/mnist")
        x_train = x_train.astype("float32") / 255.0
        ```
    """
    return load_idx_splits(path, dataset_name="MNIST", source=_SOURCE)

# The standard file names; each may also be present without the .gz suffix.
_SPLIT_FILE_NAMES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def load_idx_splits(path: str | os.PathLike[str], *, dataset_name: str, source: str) -> Splits:
    """Reads the four standard IDX files of an MNIST-shaped dataset.

    Args:
        path: The directory that holds the files.
        dataset_name: The dataset's name for error messages, e.g. "Fashion-MNIST".
        source: Where a user can get the files, for the missing-file message.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: x uint8 of shape (N, rows, cols), y int64 of shape (N,).

    Raises:
        FileNotFoundError: If the directory or any of the four files is missing.
        ValueError: If a file is not valid IDX, images are not uint8 of 3 dimensions, labels are not integers of 1
            dimension, or a split has different numbers of images and labels.
    """
    splits = []
    for images_path, labels_path in _find_files(path, dataset_name=dataset_name, source=source):
        images = idx.read_idx(images_path)
        labels = idx.read_idx(labels_path)
        _check_images_and_labels(images_path, images, labels_path, labels)
        splits.append((images, labels.astype(np.int64)))
    return splits[0], splits[1]


def _find_files(path: str | os.PathLike[str], *, dataset_name: str, source: str) -> list[tuple[str, str]]:
    """Returns [(images, labels)] paths for train then test, gzipped name first."""
    directory = os.fspath(path)
    found: dict[str, str] = {}
    for base_name in (name for names in _SPLIT_FILE_NAMES.values() for name in names):
        for candidate in (base_name + ".gz", base_name):
            if base_name not in found and os.path.isfile(os.path.join(directory, candidate)):
                found[base_name] = os.path.join(directory, candidate)
    missing = [name + ".gz" for names in _SPLIT_FILE_NAMES.values() for name in names if name not in found]
    if missing:
        state = "" if os.path.isdir(directory) else " (the directory does not exist)"
        raise FileNotFoundError(
            f"{dataset_name} is read from local IDX files and never downloaded, but {directory!r}{state} lacks "
            f"{', '.join(missing)}. The directory needs all of train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
            "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (the names without .gz work too). Get them from "
            f"{source} and pass their directory. Received: path={directory!r}")
    return [(found[images_name], found[labels_name]) for images_name, labels_name in _SPLIT_FILE_NAMES.values()]


def _check_images_and_labels(images_path: str, images: np.ndarray, labels_path: str, labels: np.ndarray) -> None:
    """Raises ValueError unless images and labels form one consistent split."""
    if images.dtype != np.uint8 or images.ndim != 3:
        raise ValueError(f"{images_path!r} must hold uint8 images of shape (N, rows, cols). Received: "
                         f"dtype={images.dtype.name}, shape={images.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.ndim != 1:
        raise ValueError(f"{labels_path!r} must hold integer labels of shape (N,). Received: "
                         f"dtype={labels.dtype.name}, shape={labels.shape}")
    if len(images) != len(labels):
        raise ValueError(f"Every image needs exactly one label, but the files hold different counts: {len(images)} "
                         f"images in {images_path!r} and {len(labels)} labels in {labels_path!r}. The files probably "
                         "come from different datasets or splits; fetch them again together. Received: "
                         f"num_images={len(images)}, num_labels={len(labels)}")
