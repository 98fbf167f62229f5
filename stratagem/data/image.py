"""``image_dataset_from_directory``: Keras' image folder loader, built from stratagem's own ops.

The file list becomes ``from_tensor_slices`` of paths (and labels), then ``shuffle``, ``map`` (decode and resize with
Pillow) and ``batch``; every node is random-access, so the dataset checkpoints in O(1) and shards by rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratagem.data.dataset import Dataset
from stratagem.data.options import AUTOTUNE

ALLOWLIST_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")

_LABEL_MODES = ("int", "categorical", "binary", None)
_CHANNELS = {"rgb": ("RGB", 3), "rgba": ("RGBA", 4), "grayscale": ("L", 1)}
_SUBSETS = ("training", "validation", "both", None)
# Keras' interpolation names -> Pillow's Resampling members (Pillow is imported on first decode). Pillow antialiases
# when shrinking (tf.image.resize does not by default), so values differ slightly from Keras'.
_RESAMPLING = {"bilinear": "BILINEAR", "nearest": "NEAREST", "bicubic": "BICUBIC", "area": "BOX", "lanczos3": "LANCZOS"}


def image_dataset_from_directory(
    directory: str | os.PathLike[str],
    labels: str | Sequence[int] | None = "inferred",
    label_mode: str | None = "int",
    class_names: Sequence[str] | None = None,
    color_mode: str = "rgb",
    batch_size: int | None = 32,
    image_size: tuple[int, int] = (256, 256),
    shuffle: bool = True,
    seed: int | None = None,
    validation_split: float | None = None,
    subset: str | None = None,
    interpolation: str = "bilinear",
    follow_links: bool = False,
    crop_to_aspect_ratio: bool = False,
) -> Dataset | tuple[Dataset, Dataset]:
    """A dataset of images (and labels) from a folder of class subfolders, as in Keras.

    With ``labels="inferred"`` the classes are the sorted subfolders (or ``class_names``); .bmp .gif .jpeg .jpg .png
    files are read recursively in sorted order, decoded with Pillow and resized: float32 ``(height, width, channels)``
    in 0..255. With ``validation_split`` the files are shuffled once with ``seed`` (Keras' rule, so both subsets agree)
    and the last ``int(validation_split * num_files)`` are the validation subset.

    Args:
        directory: The folder. With inferred labels, one subfolder per class.
        labels: ``"inferred"``, ``None`` (images only), or a list of int labels, one per image file in sorted path
            order.
        label_mode: ``"int"`` (int32 scalars), ``"categorical"`` (float32 one-hot), ``"binary"`` (float32 of shape (1,),
            two classes only) or ``None`` (images only).
        class_names: With inferred labels, the subfolders to use, in label order.
        color_mode: ``"rgb"``, ``"rgba"`` or ``"grayscale"`` (3, 4, 1 channels).
        batch_size: Images per batch; ``None`` for single images.
        image_size: ``(height, width)`` to resize to.
        shuffle: Shuffle the files (again at every epoch); else sorted order.
        seed: Seed of the shuffles; required with ``validation_split`` when ``shuffle`` is True. ``None`` uses the
            pipeline seed, which every worker of a job shares.
        validation_split: Fraction of files, in (0, 1), kept for validation.
        subset: ``"training"``, ``"validation"`` or ``"both"`` (returns the tuple ``(train, validation)``); only with
            ``validation_split``.
        interpolation: ``"bilinear"``, ``"nearest"``, ``"bicubic"``, ``"area"`` or ``"lanczos3"``.
        follow_links: Follow symbolic links to subdirectories.
        crop_to_aspect_ratio: Crop the largest centred window of the target aspect ratio before resizing, instead of
            distorting the image.

    Returns:
        A ``Dataset`` (a tuple of two with ``subset="both"``) with attributes
        ``class_names`` (``None`` without labels) and ``file_paths``.

    Raises:
        ValueError: For a missing directory, no images, a bad argument, or a file that cannot be decoded (raised while
            iterating).

    Example:
        >>> train, val = image_dataset_from_directory(
        ...     "photos", validation_split=0.2, subset="both", seed=1337, image_size=(180, 180))
        >>> train.class_names
        ['cats', 'dogs']
    """
    if labels is None or label_mode is None:
        labels, label_mode = None, None
    interpolation = interpolation.lower()
    _check_arguments(labels, label_mode, class_names, color_mode, batch_size, image_size, interpolation)
    _check_validation_split(validation_split, subset, shuffle, seed)
    paths, label_array, names = _index_directory(os.fspath(directory), labels, class_names, follow_links)
    if label_mode == "binary" and len(names or []) != 2:
        raise ValueError(f'label_mode="binary" needs exactly 2 classes. Received: class_names={names}')
    if shuffle and seed is not None:
        # Keras' global shuffle before splitting: the same seed gives the same split in every call.
        np.random.RandomState(seed).shuffle(paths)
        if label_array is not None:
            np.random.RandomState(seed).shuffle(label_array)
    decoder = _ImageDecoder(size=(int(image_size[0]), int(image_size[1])), mode=_CHANNELS[color_mode][0],
                            interpolation=interpolation, crop_to_aspect_ratio=crop_to_aspect_ratio)

    def build(paths: list[str], labels: np.ndarray | None) -> Dataset:
        """The batched pipeline over ``paths`` (and labels), with Keras' attributes."""
        path_array = np.asarray(paths, dtype=str)
        if label_mode is None:
            dataset = Dataset.from_tensor_slices(path_array)
        else:
            dataset = Dataset.from_tensor_slices((path_array, _encode_labels(labels, label_mode, len(names or []))))
        if shuffle:
            # Over a random-access list this is a fresh uniform permutation each epoch, whatever the buffer.
            dataset = dataset.shuffle(len(paths), seed=seed)
        # Decoding is Python/Pillow work: AUTOTUNE runs it in worker processes when it pays.
        dataset = dataset.map(decoder, num_parallel_calls=AUTOTUNE).map(to_float32, vectorized=True)
        if batch_size is not None:
            dataset = dataset.batch(batch_size)
        dataset.class_names = names  # type: ignore[attr-defined]
        dataset.file_paths = list(paths)  # type: ignore[attr-defined]
        return dataset

    if subset == "both":
        train = _split(paths, label_array, validation_split, "training", directory)
        validation = _split(paths, label_array, validation_split, "validation", directory)
        return build(*train), build(*validation)
    return build(*_split(paths, label_array, validation_split, subset, directory))


def _check_arguments(labels: Any, label_mode: str | None, class_names: Sequence[str] | None, color_mode: str,
                     batch_size: int | None, image_size: Any, interpolation: str) -> None:
    if not _is_inferred(labels) and labels is not None and not isinstance(labels, (list, tuple, np.ndarray)):
        raise ValueError('labels must be "inferred", None (no labels), or a list of int labels, one per image '
                         f"file in sorted order. Received: labels={labels!r}")
    if class_names is not None and not _is_inferred(labels):
        raise ValueError("class_names can only be passed with labels='inferred' (explicit labels name their "
                         f"classes by the sorted label values). Received: class_names={list(class_names)}")
    if label_mode not in _LABEL_MODES:
        raise ValueError(f"label_mode must be one of {list(_LABEL_MODES)}. Received: label_mode={label_mode!r}")
    if color_mode not in _CHANNELS:
        raise ValueError(f"color_mode must be one of {list(_CHANNELS)}. Received: color_mode={color_mode!r}")
    if interpolation not in _RESAMPLING:
        raise ValueError(f"interpolation must be one of {list(_RESAMPLING)} (the Keras names Pillow can resize "
                         f"with). Received: interpolation={interpolation!r}")
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size <= 0):
        raise ValueError(f"batch_size must be a positive integer or None. Received: batch_size={batch_size!r}")
    if len(tuple(image_size)) != 2 or any(int(side) <= 0 for side in image_size):
        raise ValueError(f"image_size must be (height, width) of positive ints. Received: image_size={image_size!r}")


def _is_inferred(labels: Any) -> bool:
    return isinstance(labels, str) and labels == "inferred"


def _check_validation_split(validation_split: float | None, subset: str | None, shuffle: bool,
                            seed: int | None) -> None:
    if validation_split is not None and not 0 < validation_split < 1:
        raise ValueError(f"validation_split must be between 0 and 1 (exclusive). "
                         f"Received: validation_split={validation_split}")
    if subset not in _SUBSETS:
        raise ValueError(f"subset must be one of {list(_SUBSETS)}. Received: subset={subset!r}")
    if bool(validation_split) != bool(subset):
        raise ValueError("validation_split and subset must be set together (or neither). "
                         f"Received: validation_split={validation_split}, subset={subset!r}")
    if validation_split and shuffle and seed is None:
        raise ValueError("With validation_split and shuffle=True, pass a seed, so that the training and validation "
                         "subsets are split from the same shuffled file list and do not overlap. Received: seed=None")


def _index_directory(directory: str, labels: Any, class_names: Sequence[str] | None,
                     follow_links: bool) -> tuple[list[str], np.ndarray | None, list[str] | None]:
    """Sorted image paths, their labels (int32) and the class names, as Keras indexes them."""
    if not os.path.isdir(directory):
        raise ValueError(f"directory must be an existing folder of images. Received: directory={directory!r}")
    if _is_inferred(labels):
        subdirs = sorted(name for name in os.listdir(directory)
                         if os.path.isdir(os.path.join(directory, name)) and not name.startswith("."))
        if class_names is not None:
            if not set(class_names) <= set(subdirs):
                raise ValueError(f"class_names must name subdirectories of {directory!r}: expected a subset of "
                                 f"{subdirs}. Received: class_names={list(class_names)}")
            subdirs = list(class_names)  # keep the caller's order: it defines the label values
        per_class = [_image_files(os.path.join(directory, name), follow_links) for name in subdirs]
        paths = [path for files in per_class for path in files]
        label_array = np.concatenate([np.full(len(files), i, np.int32) for i, files in enumerate(per_class)]
                                     or [np.zeros(0, np.int32)])
        names: list[str] | None = list(subdirs)
    else:
        paths = _image_files(directory, follow_links)
        label_array, names = None, None
        if labels is not None:
            label_array, names = _explicit_labels(labels, len(paths), directory)
    if not paths:
        raise ValueError(f"No images found in directory {directory!r}. Allowed formats: {ALLOWLIST_FORMATS}")
    return paths, label_array, names


def _image_files(folder: str, follow_links: bool) -> list[str]:
    """Image files under ``folder``, recursively, sorted by folder then name (Keras' order)."""
    found = []
    for root, _, files in sorted(os.walk(folder, followlinks=follow_links), key=lambda entry: entry[0]):
        found += [os.path.join(root, name) for name in sorted(files) if name.lower().endswith(ALLOWLIST_FORMATS)]
    return found


def _explicit_labels(labels: Sequence[int], num_files: int, directory: str) -> tuple[np.ndarray, list[str]]:
    if len(labels) != num_files:
        raise ValueError(f"labels must have one entry per image file in {directory!r} (in sorted path order). "
                         f"Received: len(labels)={len(labels)}, number of image files={num_files}")
    label_array = np.asarray(labels)
    if label_array.size and not np.issubdtype(label_array.dtype, np.integer):
        raise ValueError(f"labels must be integers. Received: labels of dtype {label_array.dtype}")
    return label_array.astype(np.int32), [str(value) for value in sorted(set(label_array.tolist()))]


def _split(paths: list[str], labels: np.ndarray | None, validation_split: float | None, subset: str | None,
           directory: Any) -> tuple[list[str], np.ndarray | None]:
    """Keras' split: the last ``int(validation_split * n)`` files are the validation subset."""
    if not validation_split:
        return paths, labels
    cut = len(paths) - int(validation_split * len(paths))
    rows = slice(0, cut) if subset == "training" else slice(cut, len(paths))
    if rows.stop - rows.start == 0:
        raise ValueError(f"No {subset} images in directory {os.fspath(directory)!r} with this split. Use a "
                         f"validation_split that leaves files on both sides. Received: validation_split="
                         f"{validation_split}, number of files={len(paths)}")
    return paths[rows], None if labels is None else labels[rows]


def _encode_labels(labels: np.ndarray | None, label_mode: str, num_classes: int) -> np.ndarray:
    assert labels is not None
    if label_mode == "binary":
        return labels.astype(np.float32).reshape(-1, 1)
    if label_mode == "categorical":
        # A label outside [0, num_classes) becomes an all-zero row, as tf.one_hot makes it.
        return (labels[:, None] == np.arange(num_classes)[None, :]).astype(np.float32)
    return labels.astype(np.int32)


@dataclass(frozen=True)
class _ImageDecoder:
    """``map`` function: path (and label) -> uint8 image of ``size`` (and the label). Picklable."""

    size: tuple[int, int]
    mode: str
    interpolation: str
    crop_to_aspect_ratio: bool

    @property
    def __name__(self) -> str:
        return "decode_and_resize"

    def __call__(self, path: Any, label: Any = None) -> Any:
        image = self.load(str(path))
        return image if label is None else (image, label)

    def load(self, path: str) -> np.ndarray:
        """Decodes ``path`` (a GIF's first frame), converts, resizes; uint8 (H, W, C)."""
        from PIL import Image

        try:
            with Image.open(path) as image:
                image.seek(0)
                converted = image.convert(self.mode)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            raise ValueError(f"Cannot decode image file {path!r}: it is corrupt or not a supported image "
                             f"({', '.join(ALLOWLIST_FORMATS)}). Remove or replace the file. "
                             f"Received: path={path!r}") from err
        box = _center_crop_box(converted.width, converted.height, self.size) if self.crop_to_aspect_ratio else None
        height, width = self.size
        # NOTE: one resize of the uint8 image (faster than per-channel float mode, 4x less data back from the workers);
        # values are within 1.0 of a float resize. The cast to float32 happens once per batch (to_float32).
        resized = np.asarray(converted.resize((width, height), getattr(Image.Resampling, _RESAMPLING[self.interpolation]), box=box))
        return resized if resized.ndim == 3 else resized[..., None]


def to_float32(image: Any, label: Any = None) -> Any:
    """Casts images (one or a batch) to float32, keeping 0..255, as Keras' loader returns them."""
    image = np.asarray(image, dtype=np.float32)
    return image if label is None else (image, label)


def _center_crop_box(width: int, height: int, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The centred window of the target aspect ratio (Keras' ``smart_resize`` crop)."""
    target_height, target_width = size
    crop_height = min(height, int(width * target_height / target_width))
    crop_width = min(width, int(height * target_width / target_height))
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    return left, top, left + crop_width, top + crop_height
