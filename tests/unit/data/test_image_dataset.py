"""``image_dataset_from_directory``: Keras' folder layout, labels, splits and decoding."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stratagem.data.image import image_dataset_from_directory
from stratagem.testing.data import assert_checkpoint_roundtrip

CLASSES = ["cat", "dog", "fish"]
SIZE = (6, 8)  # (height, width) every test resizes to


def _color(class_index: int, image_index: int) -> tuple[int, int, int]:
    """A distinct solid colour per image, so pixels identify the file."""
    return (40 * class_index + 10, 30 * image_index + 5, 200 - 20 * class_index)


@pytest.fixture
def image_dir(tmp_path: Path) -> Path:
    """3 classes x 4 images, PNG and JPEG of different sizes, plus a file that is not an image."""
    root = tmp_path / "images"
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(4):
            extension = "png" if i % 2 == 0 else "jpg"
            Image.new("RGB", (10 + 3 * i, 7 + 2 * c), _color(c, i)).save(root / name / f"img_{i}.{extension}")
    (root / "cat" / "notes.txt").write_text("not an image")
    return root


def _elements(dataset) -> list:
    return list(dataset.as_numpy_iterator())


def _pixel(image: np.ndarray) -> tuple[int, ...]:
    return tuple(int(round(v)) for v in image[0, 0])


# ---- layout and labels --------------------------------------------------------------------
def test_inferred_labels_yield_sorted_classes_and_int_labels(image_dir: Path) -> None:
    ds = image_dataset_from_directory(image_dir, batch_size=None, image_size=SIZE, shuffle=False)
    elements = _elements(ds)
    assert ds.class_names == CLASSES
    assert [os.path.relpath(p, image_dir) for p in ds.file_paths] == [
        os.path.join(name, f"img_{i}.{'png' if i % 2 == 0 else 'jpg'}") for name in CLASSES for i in range(4)]
    assert len(elements) == 12 and ds.cardinality() == 12
    image, label = elements[0]
    assert image.shape == (*SIZE, 3) and image.dtype == np.float32
    assert label.dtype == np.int32
    assert [int(label) for _, label in elements] == [0] * 4 + [1] * 4 + [2] * 4
    assert _pixel(elements[4][0]) == _color(1, 0)  # a PNG: lossless, so exact
    assert all(0.0 <= im.min() and im.max() <= 255.0 for im, _ in elements)


def test_batch_size_yields_stacked_batches_with_short_last(image_dir: Path) -> None:
    ds = image_dataset_from_directory(image_dir, batch_size=5, image_size=SIZE, shuffle=False)
    batches = _elements(ds)
    assert [b[0].shape for b in batches] == [(5, *SIZE, 3), (5, *SIZE, 3), (2, *SIZE, 3)]
    assert [b[1].shape for b in batches] == [(5,), (5,), (2,)]
    assert ds.class_names == CLASSES and len(ds.file_paths) == 12


def test_categorical_label_mode_yields_float_one_hot(image_dir: Path) -> None:
    ds = image_dataset_from_directory(image_dir, label_mode="categorical", batch_size=None, image_size=SIZE,
                                      shuffle=False)
    labels = np.stack([label for _, label in _elements(ds)])
    assert labels.dtype == np.float32
    np.testing.assert_array_equal(labels, np.repeat(np.eye(3, dtype=np.float32), 4, axis=0))


def test_binary_label_mode_with_two_classes_yields_float_column(image_dir: Path) -> None:
    ds = image_dataset_from_directory(image_dir, label_mode="binary", class_names=["dog", "cat"],
                                      batch_size=None, image_size=SIZE, shuffle=False)
    labels = [label for _, label in _elements(ds)]
    assert labels[0].shape == (1,) and labels[0].dtype == np.float32
    assert [float(label[0]) for label in labels] == [0.0] * 4 + [1.0] * 4  # dog first: class_names order
    assert ds.class_names == ["dog", "cat"]


def test_binary_label_mode_with_three_classes_raises_value_error(image_dir: Path) -> None:
    with pytest.raises(ValueError, match="exactly 2 classes"):
        image_dataset_from_directory(image_dir, label_mode="binary")


@pytest.mark.parametrize("kwargs", [{"labels": None}, {"label_mode": None}])
def test_no_labels_yields_images_only(image_dir: Path, kwargs: dict) -> None:
    ds = image_dataset_from_directory(image_dir, batch_size=None, image_size=SIZE, shuffle=False, **kwargs)
    elements = _elements(ds)
    assert isinstance(elements[0], np.ndarray) and elements[0].shape == (*SIZE, 3)
    assert len(elements) == 12
    assert ds.class_names is None


def test_explicit_labels_follow_sorted_file_order(image_dir: Path) -> None:
    labels = [5, 7] * 6
    ds = image_dataset_from_directory(image_dir, labels=labels, batch_size=None, image_size=SIZE, shuffle=False)
    assert [int(label) for _, label in _elements(ds)] == labels
    assert ds.class_names == ["5", "7"]


def test_explicit_labels_of_wrong_length_raise_value_error(image_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"Received: len\(labels\)=3, number of image files=12"):
        image_dataset_from_directory(image_dir, labels=[0, 1, 2])


def test_class_names_not_subdirectories_raise_value_error(image_dir: Path) -> None:
    with pytest.raises(ValueError, match="expected a subset of"):
        image_dataset_from_directory(image_dir, class_names=["cat", "bird"])


# ---- decoding -----------------------------------------------------------------------------
@pytest.mark.parametrize(("color_mode", "channels"), [("grayscale", 1), ("rgba", 4), ("rgb", 3)])
def test_color_mode_sets_channel_count(image_dir: Path, color_mode: str, channels: int) -> None:
    ds = image_dataset_from_directory(image_dir, color_mode=color_mode, batch_size=4, image_size=SIZE,
                                      shuffle=False)
    images, _ = next(iter(ds))
    assert tuple(images.shape) == (4, *SIZE, channels)


def test_gif_yields_first_frame_and_bmp_is_read(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (5, 5), (255, 0, 0)), Image.new("RGB", (5, 5), (0, 0, 255))]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    Image.new("RGB", (5, 5), (0, 255, 0)).save(tmp_path / "b.bmp")
    ds = image_dataset_from_directory(tmp_path, labels=None, batch_size=None, image_size=(4, 4), shuffle=False)
    gif, bmp = _elements(ds)
    assert _pixel(gif) == (255, 0, 0)
    assert _pixel(bmp) == (0, 255, 0)


def test_crop_to_aspect_ratio_keeps_the_centre(tmp_path: Path) -> None:
    image = Image.new("RGB", (30, 10), (255, 0, 0))
    image.paste((0, 255, 0), (10, 0, 20, 10))  # a green middle third between red sides
    image.save(tmp_path / "wide.png")
    cropped = image_dataset_from_directory(tmp_path, labels=None, batch_size=None, image_size=(5, 5),
                                           shuffle=False, crop_to_aspect_ratio=True, interpolation="nearest")
    squashed = image_dataset_from_directory(tmp_path, labels=None, batch_size=None, image_size=(5, 5),
                                            shuffle=False, interpolation="nearest")
    assert np.all(_elements(cropped)[0] == np.array([0, 255, 0], np.float32))
    assert _pixel(_elements(squashed)[0]) == (255, 0, 0)


def test_corrupt_file_raises_value_error_naming_file(image_dir: Path) -> None:
    bad = image_dir / "dog" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    ds = image_dataset_from_directory(image_dir, batch_size=None, image_size=SIZE, shuffle=False)
    with pytest.raises(ValueError, match="broken.png") as info:
        _elements(ds)
    assert isinstance(info.value.__cause__, OSError)  # Pillow's own error is chained


# ---- splits and shuffling -----------------------------------------------------------------
def _split_paths(image_dir: Path, subset: str, seed: int = 1337) -> list[str]:
    ds = image_dataset_from_directory(image_dir, validation_split=0.25, subset=subset, seed=seed,
                                      image_size=SIZE)
    return ds.file_paths


def test_validation_split_is_disjoint_complete_and_seeded(image_dir: Path) -> None:
    training, validation = _split_paths(image_dir, "training"), _split_paths(image_dir, "validation")
    assert len(training) == 9 and len(validation) == 3
    assert not set(training) & set(validation)
    all_files = image_dataset_from_directory(image_dir, shuffle=False).file_paths
    assert sorted(training + validation) == sorted(all_files)
    assert _split_paths(image_dir, "validation") == validation  # same seed, same split
    assert {frozenset(_split_paths(image_dir, "validation", seed=s)) for s in range(5)} != {frozenset(validation)}


def test_subset_both_returns_training_and_validation_tuple(image_dir: Path) -> None:
    train, val = image_dataset_from_directory(image_dir, validation_split=0.25, subset="both", seed=1337,
                                              image_size=SIZE, batch_size=None)
    assert train.file_paths == _split_paths(image_dir, "training")
    assert val.file_paths == _split_paths(image_dir, "validation")
    assert train.class_names == val.class_names == CLASSES
    expected_labels = sorted(CLASSES.index(Path(p).parent.name) for p in val.file_paths)
    assert sorted(int(label) for _, label in _elements(val)) == expected_labels


def test_validation_split_with_shuffle_and_no_seed_raises_value_error(image_dir: Path) -> None:
    with pytest.raises(ValueError, match="pass a seed"):
        image_dataset_from_directory(image_dir, validation_split=0.2, subset="training")


def test_validation_split_without_shuffle_splits_sorted_files(image_dir: Path) -> None:
    ds = image_dataset_from_directory(image_dir, validation_split=0.25, subset="validation", shuffle=False)
    assert [os.path.basename(os.path.dirname(p)) for p in ds.file_paths] == ["fish"] * 3


def test_seeded_shuffle_is_deterministic_permutation_reshuffled_per_epoch(image_dir: Path) -> None:
    def order(epoch: int) -> list[int]:
        ds = image_dataset_from_directory(image_dir, batch_size=None, image_size=(2, 2), seed=3)
        return [int(label) for _, label in ds.iterator(epoch=epoch)]

    assert order(0) == order(0)
    assert sorted(order(0)) == [0] * 4 + [1] * 4 + [2] * 4
    assert order(0) != order(1)


def test_unbatched_dataset_checkpoint_roundtrip(image_dir: Path) -> None:
    ds = image_dataset_from_directory(image_dir, batch_size=None, image_size=(3, 3), seed=5)
    assert len(assert_checkpoint_roundtrip(ds)) == 12


# ---- argument errors ----------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"label_mode": "sparse"}, r"label_mode must be one of \['int', 'categorical', 'binary', None\]"),
    ({"color_mode": "cmyk"}, r"color_mode must be one of \['rgb', 'rgba', 'grayscale'\]"),
    ({"subset": "test", "validation_split": 0.2, "seed": 1}, r"subset must be one of \['training', 'validation'"),
    ({"interpolation": "gaussian"}, "interpolation must be one of"),
    ({"validation_split": 0.2}, "must be set together"),
    ({"validation_split": 1.5, "subset": "training", "seed": 1}, "between 0 and 1"),
    ({"labels": "folders"}, "labels must be"),
    ({"batch_size": 0}, "batch_size must be"),
])
def test_invalid_argument_raises_value_error_listing_valid_values(image_dir: Path, kwargs: dict,
                                                                   message: str) -> None:
    with pytest.raises(ValueError, match=message):
        image_dataset_from_directory(image_dir, **kwargs)


def test_missing_directory_raises_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Received: directory="):
        image_dataset_from_directory(tmp_path / "nowhere")


def test_directory_without_images_raises_value_error_naming_formats(tmp_path: Path) -> None:
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "readme.txt").write_text("no images here")
    with pytest.raises(ValueError, match=r"No images found in directory .*Allowed formats: \('.bmp'"):
        image_dataset_from_directory(tmp_path)
