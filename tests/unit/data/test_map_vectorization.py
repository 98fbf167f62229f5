"""Map vectorisation's opt-in sampled check (``options.experimental_optimization.map_vectorization = True`` calls a
numpy ``map`` that vmap cannot run once per batch after a sampled check; the sound default is in
``test_map_per_row.py``) and the random-access cache's columns (batches gathered, not stacked)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from stratagem.data import AUTOTUNE, Dataset, Options
from stratagem.data._structure import same_elements, stack
from stratagem.testing.data import assert_checkpoint_roundtrip


def preprocessing(img: np.ndarray, label: Any) -> tuple[np.ndarray, np.ndarray]:
    """Seed 000's function: works on one element and on a batch alike."""
    return np.expand_dims(img.astype(np.float64) / 255.0, -1), np.eye(10, dtype=np.int32)[label]


def _images(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(n, 6, 5), dtype=np.uint8), rng.integers(0, 10, size=n)


def _per_element_batches(fn: Any, x: np.ndarray, y: np.ndarray, batch_size: int) -> list[Any]:
    """The batches of map(fn).batch(batch_size), computed one element at a time (the definition)."""
    elements = [fn(x[i], y[i]) for i in range(len(x))]
    return [stack(elements[i : i + batch_size]) for i in range(0, len(elements), batch_size)]


def _vectorizing(dataset: Dataset) -> Dataset:
    """``dataset`` with the sampled map vectorisation switched on (attached at the end, as TF users do)."""
    options = Options()
    options.experimental_optimization.map_vectorization = True
    return dataset.with_options(options)


class _Calls:
    """Wraps a function and counts its calls and the elements (rows) it was called on."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, img: Any, label: Any) -> Any:
        self.calls += 1
        return self.fn(img, label)


@pytest.mark.parametrize("num_parallel_calls", [None, AUTOTUNE])
def test_map_that_works_on_batches_runs_once_per_batch_with_the_same_elements(num_parallel_calls: Any) -> None:
    x, y = _images(300)
    counted = _Calls(preprocessing)
    ds = _vectorizing(Dataset.from_tensor_slices((x, y)).map(counted, num_parallel_calls=num_parallel_calls).batch(32))
    got = list(ds)
    expected = _per_element_batches(preprocessing, x, y, 32)
    assert len(got) == len(expected) == 10
    for batch, reference in zip(got, expected):
        assert same_elements(tuple(batch), tuple(reference))  # dtypes, shapes and values
    # One call under vmap (refused: numpy on a tensor), 10 batch calls, the first batch's 32 rows one by one (the
    # check), the first and last rows of the 9 others.
    assert counted.calls == 1 + 10 + 32 + 2 * 9


def _normalize(img: np.ndarray, label: Any) -> tuple[np.ndarray, Any]:
    """Per element: centred on its own mean. On a batch it would centre on the batch's mean."""
    return img - img.mean(), label


def _one_label(img: np.ndarray, label: Any) -> tuple[np.ndarray, np.ndarray]:
    """Fails on a batch (int() of an array of several values)."""
    return img, np.int64(int(label) * 2)


def _differs_on_some_rows(img: np.ndarray, label: Any) -> tuple[np.ndarray, Any]:
    """Zero where the label is 5 or more; on a batch, zero only where every label is."""
    return img * (np.min(label) < 5), label


@pytest.mark.parametrize("first_batch_agrees", [False, True])
@pytest.mark.parametrize("fn", [_normalize, _one_label, _differs_on_some_rows])
def test_map_that_differs_on_a_batch_keeps_per_element_results(fn: Any, first_batch_agrees: bool) -> None:
    x, y = _images(200)
    if first_batch_agrees:  # _differs_on_some_rows passes the first check; a later batch's first row fails it
        y[:16], y[16] = 0, 9
    got = list(_vectorizing(Dataset.from_tensor_slices((x, y)).map(fn).batch(16)))
    expected = _per_element_batches(lambda a, b: tuple(np.asarray(v) for v in fn(a, b)), x, y, 16)
    for batch, reference in zip(got, expected, strict=True):
        for part, ref in zip(batch, reference):
            np.testing.assert_array_equal(part, ref)


def test_map_differing_only_on_a_middle_row_of_a_later_batch_gives_per_element_results_by_default() -> None:
    x, y = _images(200)
    y[:] = np.arange(200) % 5  # every label below 5: the batch call agrees with per-element calls ...
    y[3 * 16 + 7] = 9  # ... except on row 7 of batch 3, which per element is zeroed
    counted = _Calls(_differs_on_some_rows)
    pipeline = Dataset.from_tensor_slices((x, y)).map(counted).batch(16)
    expected = _per_element_batches(lambda a, b: tuple(np.asarray(v) for v in _differs_on_some_rows(a, b)), x, y, 16)
    for batch, reference in zip(list(pipeline), expected, strict=True):
        for part, ref in zip(batch, reference):
            np.testing.assert_array_equal(part, ref)
    assert counted.calls == 1 + 200  # one try under vmap (refused), then per element, never on a plain batch
    assert not np.any(expected[3][0][7]) and np.all(expected[3][0][[6, 8]].any(axis=(1, 2)))
    # The opt-in switch checks a later batch's first and last rows only (documented): it serves the batch call.
    counted.calls = 0
    sampled = list(_vectorizing(pipeline))
    assert counted.calls == 13 + 16 + 2 * 12  # (vmap already refused at this node) 13 batch calls, the first batch per element, 2 rows of the others
    np.testing.assert_array_equal(sampled[3][0][7], x[3 * 16 + 7])


def test_map_vectorization_switch_reaches_a_filling_cache_and_survives_a_restored_position() -> None:
    x, y = _images(3000)
    counted = _Calls(preprocessing)
    cached = _vectorizing(Dataset.from_tensor_slices((x, y)).map(counted, num_parallel_calls=AUTOTUNE).cache().batch(64))
    iterator = iter(cached)
    next(iterator)
    assert counted.calls == 1 + 3 + 256 + 2 * 2  # a refused vmap try, 3 chunks (1,024 rows), a call each; 256 rows, then 2 per chunk, checked
    state = iterator.get_state()
    restored = iter(cached)
    restored.set_state(state)
    assert restored._ctx.map_vectorization  # type: ignore[attr-defined]


def test_map_raising_on_one_element_raises_it_as_without_vectorisation() -> None:
    def explode(x: Any) -> Any:
        if np.any(np.asarray(x) == 37):
            raise KeyError("element 37 is broken")
        return x * 2

    with pytest.raises(KeyError, match="element 37 is broken"):
        list(Dataset.range(100).map(explode).batch(10))


def test_vectorised_map_keeps_checkpoint_roundtrip() -> None:
    x, y = _images(50)
    assert_checkpoint_roundtrip(Dataset.from_tensor_slices((x, y)).map(preprocessing).shuffle(50, seed=1).batch(8))


def test_cache_of_random_access_map_serves_the_same_batches_as_without_cache() -> None:
    x, y = _images(3000)  # several fill chunks
    mapped = Dataset.from_tensor_slices((x, y)).map(preprocessing, num_parallel_calls=AUTOTUNE)
    plain = list(mapped.batch(64))
    cached = mapped.cache()
    for ours in (list(cached.batch(64)), list(cached.batch(64))):  # the pass that fills, and one that reads
        for batch, reference in zip(ours, plain, strict=True):
            assert same_elements(tuple(batch), tuple(reference))
    element = next(iter(cached))
    assert same_elements(element, preprocessing(x[0], y[0]))  # one element, as the map makes it
    labels = np.concatenate([batch[1].argmax(axis=1) for batch in cached.shuffle(3000, seed=2).batch(100)])
    np.testing.assert_array_equal(np.sort(labels), np.sort(y))


def test_cache_keeps_ragged_and_tensor_elements_as_they_are() -> None:
    ragged = Dataset.range(7).map(lambda i: np.arange(int(i))).cache()  # no common row shape: kept as a list
    assert [len(e) for e in ragged] == [len(e) for e in ragged] == list(range(7))
    tensors = Dataset.range(5).map(lambda i: {"t": torch.full((2,), float(i))}).cache()
    first, again = list(tensors), list(tensors)
    assert all(isinstance(e["t"], torch.Tensor) for e in again)
    assert [e["t"].tolist() for e in first] == [e["t"].tolist() for e in again] == [[float(i)] * 2 for i in range(5)]
    assert_checkpoint_roundtrip(tensors.batch(2))


def test_cache_columns_populated_in_the_background_keep_every_value() -> None:
    # 3,000 float64 images of 28x28 (19 MB) and float32 tensors (1.5 MB): the first column is over the size whose
    # pages a background thread makes resident while the fill writes them (_column_memory.py); none may be lost.
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 256, size=(3000, 28, 28), dtype=np.uint8), rng.integers(0, 10, size=3000)
    cached = Dataset.from_tensor_slices((x, y)).map(
        lambda img, label: (img.astype(np.float64) / 255.0, torch.full((128,), float(label)))).cache()
    images, labels = next(iter(cached.batch(3000)))
    np.testing.assert_array_equal(images, x.astype(np.float64) / 255.0)
    torch.testing.assert_close(labels, torch.tensor(y, dtype=torch.float32)[:, None].expand(3000, 128), rtol=0, atol=0)
