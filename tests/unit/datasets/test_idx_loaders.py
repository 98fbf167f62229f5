"""Tests of mnist.load_data and fashion_mnist.load_data on small IDX files."""

from __future__ import annotations

import pathlib
import types

import numpy as np
import pytest

from stratagem.datasets import fashion_mnist, idx, mnist

_LOADERS = [fashion_mnist, mnist]
_NUM_TRAIN, _NUM_TEST = 12, 5


def _write_dataset(
    directory: pathlib.Path, *, suffix: str = ".gz", num_test_labels: int = _NUM_TEST
) -> dict[str, np.ndarray]:
    """Writes the four standard files with distinct values; returns what they hold."""
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (_NUM_TRAIN, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, _NUM_TRAIN, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (_NUM_TEST, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, num_test_labels, dtype=np.uint8),
    }
    for name, array in arrays.items():
        idx.write_idx(directory / (name + suffix), array)
    return arrays


@pytest.mark.parametrize("suffix", [".gz", ""], ids=["gzipped", "raw"])
@pytest.mark.parametrize("loader", _LOADERS, ids=lambda module: module.__name__)
def test_standard_files_load_as_keras_shaped_splits(
    tmp_path: pathlib.Path, loader: types.ModuleType, suffix: str
) -> None:
    arrays = _write_dataset(tmp_path, suffix=suffix)
    (x_train, y_train), (x_test, y_test) = loader.load_data(tmp_path)
    assert x_train.shape == (_NUM_TRAIN, 28, 28) and x_test.shape == (_NUM_TEST, 28, 28)
    assert x_train.dtype == np.uint8 and x_test.dtype == np.uint8
    assert y_train.dtype == np.int64 and y_test.dtype == np.int64
    np.testing.assert_array_equal(x_train, arrays["train-images-idx3-ubyte"])
    np.testing.assert_array_equal(y_train, arrays["train-labels-idx1-ubyte"])
    np.testing.assert_array_equal(x_test, arrays["t10k-images-idx3-ubyte"])
    np.testing.assert_array_equal(y_test, arrays["t10k-labels-idx1-ubyte"])


def test_string_path_with_gzipped_and_raw_files_mixed_loads(tmp_path: pathlib.Path) -> None:
    arrays = _write_dataset(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    idx.write_idx(tmp_path / "t10k-labels-idx1-ubyte", arrays["t10k-labels-idx1-ubyte"])
    (_, _), (_, y_test) = fashion_mnist.load_data(str(tmp_path))
    np.testing.assert_array_equal(y_test, arrays["t10k-labels-idx1-ubyte"])


@pytest.mark.parametrize("loader", _LOADERS, ids=lambda module: module.__name__)
def test_missing_file_raises_file_not_found_error_listing_names(
    tmp_path: pathlib.Path, loader: types.ModuleType
) -> None:
    _write_dataset(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError) as error_info:
        loader.load_data(tmp_path)
    message = str(error_info.value)
    assert "lacks train-labels-idx1-ubyte.gz." in message
    assert str(tmp_path) in message and "never downloaded" in message
    for name in (
        "train-images-idx3-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ):
        assert name in message


def test_missing_directory_raises_file_not_found_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"the directory does not exist.*Received: path="):
        fashion_mnist.load_data(tmp_path / "absent")


@pytest.mark.parametrize("loader", _LOADERS, ids=lambda module: module.__name__)
def test_label_count_mismatch_raises_value_error_naming_both_counts(
    tmp_path: pathlib.Path, loader: types.ModuleType
) -> None:
    _write_dataset(tmp_path, num_test_labels=_NUM_TEST + 1)
    with pytest.raises(
        ValueError,
        match=r"5 images in .*t10k-images.*6 labels in .*Received: num_images=5, num_labels=6",
    ):
        loader.load_data(tmp_path)


def test_images_not_uint8_raise_value_error(tmp_path: pathlib.Path) -> None:
    _write_dataset(tmp_path)
    float_images = np.zeros((_NUM_TRAIN, 28, 28), np.float32)
    idx.write_idx(tmp_path / "train-images-idx3-ubyte.gz", float_images)
    with pytest.raises(ValueError, match=r"uint8 images.*Received: dtype=float32"):
        mnist.load_data(tmp_path)
