"""tf.keras.datasets load_data() reads Keras's cache (filled here from the bundled digits) and says what to do offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stratagem.tf as tf
from stratagem.datasets import digits, idx, keras_cache


@pytest.fixture
def keras_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(keras_cache, "ORIGIN", "http://127.0.0.1:9/")  # the discard port: refused at once, offline
    return tmp_path


def test_mnist_load_data_reads_keras_npz_from_the_cache(keras_home: Path) -> None:
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    arrays = {"x_train": x_train, "y_train": y_train.astype(np.uint8), "x_test": x_test,
              "y_test": y_test.astype(np.uint8)}
    (keras_home / "datasets").mkdir()
    np.savez(keras_home / "datasets" / "mnist.npz", **arrays)  # the file and keys Keras downloads
    (got_x, got_y), (got_x_test, got_y_test) = tf.keras.datasets.mnist.load_data()
    for got, key in ((got_x, "x_train"), (got_y, "y_train"), (got_x_test, "x_test"), (got_y_test, "y_test")):
        np.testing.assert_array_equal(got, arrays[key])
        assert got.dtype == np.uint8


def test_fashion_mnist_load_data_reads_keras_gzipped_idx_files(keras_home: Path) -> None:
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    folder = keras_home / "datasets" / "fashion-mnist"
    folder.mkdir(parents=True)
    for name, array in (("train-images-idx3-ubyte.gz", x_train), ("train-labels-idx1-ubyte.gz", y_train),
                        ("t10k-images-idx3-ubyte.gz", x_test), ("t10k-labels-idx1-ubyte.gz", y_test)):
        idx.write_idx(folder / name, array.astype(np.uint8))
    (got_x, got_y), (got_x_test, got_y_test) = tf.keras.datasets.fashion_mnist.load_data()
    np.testing.assert_array_equal(got_x, x_train)
    np.testing.assert_array_equal(got_y_test, y_test)
    assert got_x_test.shape == (len(y_test), 28, 28) and got_y.dtype == np.uint8


def test_offline_and_not_cached_names_the_file_and_the_bundled_digits(keras_home: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        tf.keras.datasets.mnist.load_data()
    message = str(caught.value)
    assert str(keras_home / "datasets" / "mnist.npz") in message and "stratagem.datasets.digits" in message
    assert not list((keras_home / "datasets").iterdir()), "no partial download left behind"


def test_unbundled_keras_datasets_are_refused_with_a_reason() -> None:
    with pytest.raises(AttributeError, match="cifar10.*pickle"):
        tf.keras.datasets.cifar10  # noqa: B018
