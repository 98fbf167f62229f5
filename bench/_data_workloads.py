"""The input pipelines that ``bench_data.py`` times, one epoch each, as plain functions.

Here: the synthetic uint8 images, the seed's ``preprocessing`` function, the
stratagem pipelines, the torch ``DataLoader`` setups they replace, the JPEG
folder (written once, with Pillow, from a fixed seed), the epoch timer, and
the ``fit`` run that reads ``model.input_wait_fraction``. Timing policy
(repeats, best-of, ratios), the report and the plot live in ``bench_data.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

import stratagem
import stratagem.tf as tf
from stratagem.data import AUTOTUNE, Dataset

import _fit_workloads

IMAGE_SIDE = 28
NUM_CLASSES = 10
BATCH_SIZE = 256
WARMUP_BATCHES = 5
DATA_SEED = 0
JPEG_SEED = 3
JPEG_BATCH_SIZE = 64
JPEG_IMAGE_SIZE = (64, 64)
JPEG_SIDE_RANGE = (64, 96)  # each JPEG's height and width, drawn in this range (about 80x80)
NUM_JPEG_CLASSES = 5
FIT_BATCH_SIZE = 64
FIT_STEPS = 200
FIT_WARMUP_STEPS = 5


@dataclass(frozen=True)
class EpochTiming:
    """One timed pass: wall seconds and the elements it yielded."""

    seconds: float
    num_elements: int

    @property
    def elements_per_s(self) -> float:
        return self.num_elements / self.seconds


@dataclass(frozen=True)
class FitTiming:
    """One timed ``fit`` epoch: its input wait fraction, wall seconds and steps."""

    input_wait_fraction: float
    seconds: float
    num_steps: int


# ---- the seed-000 workload ------------------------------------------------------------
def preprocessing(img: np.ndarray, label: Any) -> tuple[np.ndarray, np.ndarray]:
    """The seed's function (numpy for tf); works on one element and on a batch alike."""
    img = img.astype(np.float64) / 255.
    img = np.expand_dims(img, -1)
    label = np.eye(10, dtype=np.int32)[label]
    return img, label


def seed_preprocessing(img: Any, label: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's function exactly as its TF script writes it, through ``stratagem.tf`` (torch ops).

    Works on one element and on a batch alike; stratagem runs it once per batch under vmap by default.
    """
    img = tf.cast(img, tf.float64)
    img = img / 255.
    img = tf.expand_dims(img, axis=-1)
    label = tf.one_hot(label, 10, dtype=tf.int32)
    return img, label


def make_images(num_images: int, seed: int = DATA_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST-shaped raw data: uint8 images (N, 28, 28) and int64 labels 0..9."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(num_images, IMAGE_SIDE, IMAGE_SIDE), dtype=np.uint8)
    labels = rng.integers(0, NUM_CLASSES, size=num_images, dtype=np.int64)
    return images, labels


def to_float32(img: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cast that feeds ``preprocessing``'s float64 images to a float32 model."""
    return img.astype(np.float32), label


def seed_pipeline(x: np.ndarray, y: np.ndarray, *, vectorized: bool, batch_size: int = BATCH_SIZE,
                  cast_float32: bool = False, take: int | None = None) -> Dataset:
    """The seed's pipeline; ``vectorized`` swaps the AUTOTUNE map for one call per batch.

    ``cast_float32`` adds a vectorised ``to_float32`` map after
    ``preprocessing``; ``take`` keeps that many batches (before ``prefetch``).
    """
    dataset = Dataset.from_tensor_slices((x, y))
    if vectorized:
        dataset = dataset.map(preprocessing, vectorized=True)
    else:
        dataset = dataset.map(preprocessing, num_parallel_calls=AUTOTUNE)
    if cast_float32:
        dataset = dataset.map(to_float32, vectorized=True)
    dataset = dataset.shuffle(256).batch(batch_size)
    if take is not None:
        dataset = dataset.take(take)
    return dataset.prefetch(AUTOTUNE)


CHAIN_BATCH_SIZE = 64


def cached_chain(x: np.ndarray, y: np.ndarray, *, fn: Any = seed_preprocessing,
                 map_vectorization: bool | None = None) -> Dataset:
    """The issue's seed-000 chain: map(fn, AUTOTUNE) -> cache -> shuffle(10000) -> batch(64) -> prefetch.

    ``fn`` is the seed's function through ``stratagem.tf`` unless given (``preprocessing``, the numpy one, for
    information); ``map_vectorization`` sets ``options.experimental_optimization.map_vectorization`` (None: the
    default, vmap where it gives the same elements; True adds the opt-in sampled check for numpy functions).
    """
    dataset = Dataset.from_tensor_slices((x, y)).map(fn, num_parallel_calls=AUTOTUNE).cache()
    dataset = dataset.shuffle(10_000).batch(CHAIN_BATCH_SIZE).prefetch(AUTOTUNE)
    if map_vectorization is not None:
        options = stratagem.data.Options()
        options.experimental_optimization.map_vectorization = map_vectorization
        dataset = dataset.with_options(options)
    return dataset


def time_first_epoch(make: Any, num_elements: int) -> EpochTiming:
    """Times what a user waits for on a new pipeline: ``make()`` (a dataset or DataLoader), ``iter()`` and one pass.

    No warm-up: start-up (worker processes, AUTOTUNE calibration, filling a cache) is inside the time.
    """
    start = time.perf_counter()
    count = sum(_touch(batch) for batch in make())
    seconds = time.perf_counter() - start
    if count != num_elements:
        raise RuntimeError(f"One epoch must yield every element once. Received: {count} elements, "
                           f"expected {num_elements}")
    return EpochTiming(seconds, count)


def time_cached_epoch(x: np.ndarray, y: np.ndarray) -> EpochTiming:
    """A pass over ``cached_chain`` after one full pass filled its cache."""
    dataset = cached_chain(x, y)
    for batch in dataset:
        _touch(batch)
    start = time.perf_counter()
    count = sum(_touch(batch) for batch in dataset)
    return EpochTiming(time.perf_counter() - start, count)


class ItemDataset(torch.utils.data.Dataset):
    """Map-style dataset: ``preprocessing`` on one item, as a torch user writes it."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return preprocessing(self.x[index], self.y[index])


class BatchItemDataset(ItemDataset):
    """The same, indexed by a list of indices: one ``preprocessing`` call per batch (or ``fn``'s)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, fn: Any = preprocessing) -> None:
        super().__init__(x, y)
        self.fn = fn

    def __getitem__(self, indices: list[int]) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[override]
        return self.fn(self.x[indices], self.y[indices])


def item_loader(x: np.ndarray, y: np.ndarray, num_workers: int, batch_size: int = BATCH_SIZE) -> DataLoader:
    """``DataLoader(ds, batch_size=256, shuffle=True, num_workers=w)``; workers kept across epochs."""
    return DataLoader(ItemDataset(x, y), batch_size=batch_size, shuffle=True, num_workers=num_workers,
                      persistent_workers=num_workers > 0)


def batch_loader(x: np.ndarray, y: np.ndarray, num_workers: int, batch_size: int = BATCH_SIZE,
                 fn: Any = preprocessing) -> DataLoader:
    """The vectorised equivalent: a shuffled ``BatchSampler`` hands whole batches to ``__getitem__``."""
    dataset = BatchItemDataset(x, y, fn)
    sampler = BatchSampler(RandomSampler(dataset), batch_size=batch_size, drop_last=False)
    # batch_size=None: no collation step, each item already is a batch (converted to tensors).
    return DataLoader(dataset, batch_size=None, sampler=sampler, num_workers=num_workers,
                      persistent_workers=num_workers > 0)


# ---- the JPEG folder --------------------------------------------------------------------
def write_jpegs(root: Path, num_jpegs: int, seed: int = JPEG_SEED) -> None:
    """``num_jpegs`` RGB JPEGs of 64..96 pixels a side in ``NUM_JPEG_CLASSES`` class folders."""
    rng = np.random.default_rng(seed)
    low, high = JPEG_SIDE_RANGE
    for index in range(num_jpegs):
        folder = root / f"class_{index % NUM_JPEG_CLASSES}"
        folder.mkdir(parents=True, exist_ok=True)
        height, width = (int(side) for side in rng.integers(low, high + 1, size=2))
        # Smooth colour fields plus grain: compresses and decodes like a photo (pure noise would not).
        coarse = Image.fromarray(rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8))
        smooth = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
        pixels = np.clip(smooth + rng.integers(-12, 13, size=smooth.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"img_{index:05d}.jpg", quality=90)


class JpegFolder(torch.utils.data.Dataset):
    """Map-style dataset over the class folders: Pillow decode, RGB, 64x64 bilinear, float32 HWC.

    ``float_resize=True`` resizes each channel in Pillow's float mode instead
    of uint8 RGB, as stratagem's loader does (for information: it separates
    the cost of that decode from the cost of the pipeline around it).
    """

    def __init__(self, root: Path, *, float_resize: bool = False) -> None:
        class_names = sorted(path.name for path in root.iterdir() if path.is_dir())
        self.samples = [(str(path), label) for label, name in enumerate(class_names)
                        for path in sorted((root / name).glob("*.jpg"))]
        self.float_resize = float_resize

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        path, label = self.samples[index]
        height, width = JPEG_IMAGE_SIZE
        with Image.open(path) as image:
            rgb = image.convert("RGB")
        if self.float_resize:
            bands = [np.asarray(band.convert("F").resize((width, height), Image.Resampling.BILINEAR))
                     for band in rgb.split()]
            return np.stack(bands, axis=-1), label
        return np.asarray(rgb.resize((width, height), Image.Resampling.BILINEAR), dtype=np.float32), label


def jpeg_loader(root: Path, num_workers: int, *, float_resize: bool = False) -> DataLoader:
    return DataLoader(JpegFolder(root, float_resize=float_resize), batch_size=JPEG_BATCH_SIZE, shuffle=True,
                      num_workers=num_workers, persistent_workers=num_workers > 0)


def jpeg_pipeline(root: Path) -> Dataset:
    dataset = stratagem.data.image_dataset_from_directory(root, image_size=JPEG_IMAGE_SIZE,
                                                          batch_size=JPEG_BATCH_SIZE, shuffle=True, seed=1)
    return dataset.prefetch(AUTOTUNE)


# ---- timing one epoch -------------------------------------------------------------------
# ---- GIL-bound Python in map ----------------------------------------------------------
GIL_IMAGES = 4_000  # elements of the GIL-bound pass (about 1 ms of Python each)
GIL_BATCH_SIZE = 40


def gil_bound_preprocessing(img: np.ndarray, label: Any) -> tuple[np.ndarray, Any]:
    """About 1 ms of pure-Python work per element: holds the GIL the whole time, so threads cannot help.

    Written for one element (``int(label)``), so map vectorisation cannot run it once per batch.
    """
    total = int(label)
    for i in range(25_000):
        total += i % 7
    return img, np.int64(total)


def gil_bound_pipeline(x: np.ndarray, y: np.ndarray, *, parallel: bool) -> Dataset:
    """``map(gil_bound_preprocessing)`` over the first ``GIL_IMAGES`` images, AUTOTUNE or sequential."""
    dataset = Dataset.from_tensor_slices((x[:GIL_IMAGES], y[:GIL_IMAGES]))
    dataset = dataset.map(gil_bound_preprocessing, num_parallel_calls=AUTOTUNE if parallel else None)
    return dataset.batch(GIL_BATCH_SIZE)


def time_epoch(source: Iterable[Any], num_elements: int) -> EpochTiming:
    """Times one full pass over ``source``, after ``WARMUP_BATCHES`` batches of an untimed pass.

    The warm-up starts what lives across epochs (stratagem's AUTOTUNE
    calibration and worker pool, a DataLoader's persistent workers). Its
    iterator is closed before the clock starts, so no prefetch thread of it
    competes with the timed pass.
    """
    warmup = iter(source)
    for _, batch in zip(range(WARMUP_BATCHES), warmup):
        _touch(batch)
    close = getattr(warmup, "close", None)
    if close is not None:
        close()
    del warmup
    start = time.perf_counter()
    count = sum(_touch(batch) for batch in source)
    seconds = time.perf_counter() - start
    if count != num_elements:
        raise RuntimeError(f"One epoch must yield every element once. Received: {count} elements, "
                           f"expected {num_elements}")
    return EpochTiming(seconds, count)


def _touch(batch: tuple[Any, Any]) -> int:
    """Reads the shapes of a batch's two components (what a consumer does first); returns its size."""
    images, labels = batch
    if images.shape[0] != labels.shape[0]:
        raise RuntimeError(f"Images and labels of a batch differ in size: {images.shape} vs {labels.shape}")
    return int(images.shape[0])


def describe_batch(source: Iterable[Any]) -> str:
    """Shapes and dtypes of the first batch, to show both sides produce the same thing."""
    iterator = iter(source)
    images, labels = next(iterator)
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
    return f"{tuple(images.shape)} {_dtype_name(images)}, {tuple(labels.shape)} {_dtype_name(labels)}"


def _dtype_name(array: Any) -> str:
    return str(array.dtype).replace("torch.", "")


# ---- input wait in fit ------------------------------------------------------------------
def build_fit_model() -> stratagem.Model:
    """The seed CNN behind a Flatten, so it takes the preprocessed (N, 28, 28, 1) images."""
    # Flatten gives (N, 784); build_net unflattens that to (N, 1, 28, 28): with one
    # channel, HWC and CHW order the pixels the same way.
    net = nn.Sequential(nn.Flatten(), _fit_workloads.build_net())
    model = stratagem.Model(net)
    # SGD: the cheapest step, so the most demanding of the input pipeline.
    model.compile(optimizer="sgd", loss=stratagem.losses.CategoricalCrossentropy(from_logits=True))
    return model


def time_fit(x: np.ndarray, y: np.ndarray, *, use_take: bool, cast_float32: bool = True) -> FitTiming:
    """One ``fit`` epoch of up to ``FIT_STEPS`` steps on the vectorised seed pipeline (batch 64).

    ``use_take=False``: the whole pipeline with ``steps_per_epoch``;
    ``use_take=True``: the pipeline cut with ``.take(steps)`` before
    ``prefetch``. ``cast_float32=False`` leaves the batches float64, which
    stratagem's input adapter then converts to torch's default float32.
    """
    num_steps = min(FIT_STEPS, len(x) // FIT_BATCH_SIZE)
    model = build_fit_model()

    def pipeline(take: int | None) -> Dataset:
        return seed_pipeline(x, y, vectorized=True, batch_size=FIT_BATCH_SIZE, cast_float32=cast_float32, take=take)

    model.fit(pipeline(None), epochs=1, steps_per_epoch=FIT_WARMUP_STEPS, verbose=0)
    dataset, steps_per_epoch = (pipeline(num_steps), None) if use_take else (pipeline(None), num_steps)
    start = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps_per_epoch, verbose=0)
    seconds = time.perf_counter() - start
    return FitTiming(model.input_wait_fraction, seconds, num_steps)
