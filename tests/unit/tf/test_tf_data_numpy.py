"""Elements read in a Python loop answer ``.numpy()`` as TF's eager tensors do (TF's guide/data code).

What TF 2.21 gives was checked with TF itself: ``numpy()`` of a 0-d element is a numpy scalar of
its dtype, of a 0-d string Python ``bytes``, of a batch of strings an ``object`` array of ``bytes``.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stratagem.tf as tf
from stratagem._nest import map_structure
from stratagem.data import _eager
from stratagem.data._structure import same_elements
from stratagem.io import TFRecordWriter


def test_elements_of_a_for_loop_have_numpy() -> None:
    # guide/data: `for elem in dataset: print(elem.numpy())`
    dataset = tf.data.Dataset.from_tensor_slices([8, 3, 0, 8, 2, 1])
    values = [elem.numpy() for elem in dataset]
    assert values == [8, 3, 0, 8, 2, 1]
    assert all(type(value) is np.int32 for value in values)


def test_next_of_iter_and_reduce_have_numpy() -> None:
    dataset = tf.data.Dataset.from_tensor_slices([8, 3, 0, 8, 2, 1])
    iterator = iter(dataset)
    assert next(iterator).numpy() == 8
    assert next(iterator).numpy() == 3
    assert dataset.reduce(0, lambda state, value: state + value).numpy() == 22


def test_batches_tuples_strings_and_bools() -> None:
    batch = next(iter(tf.data.Dataset.range(10).batch(4)))
    assert type(batch.numpy()) is np.ndarray
    np.testing.assert_array_equal(batch.numpy(), [0, 1, 2, 3])
    images = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    for number, (image, flag) in tf.data.Dataset.from_tensor_slices((np.array([1.5, 2.5]), (images, [True, False]))):
        assert type(number.numpy()) is np.float64
        assert type(image.numpy()) is np.ndarray and image.numpy().dtype == np.float32
        assert type(flag.numpy()) is np.bool_
    assert number.numpy() == 2.5 and not flag  # the last element
    lines = tf.data.Dataset.from_tensor_slices(["a b", "c"])
    assert [line.numpy() for line in lines] == [b"a b", b"c"]
    strings = next(iter(lines.batch(2))).numpy()
    assert strings.dtype == object and strings.tolist() == [b"a b", b"c"]


def test_values_stay_numpy_values() -> None:
    dataset = tf.data.Dataset.from_tensor_slices([8, 3])
    first = next(iter(dataset))
    assert isinstance(first, np.int32) and first == 8 and first + 1 == 9
    assert {first, next(iter(dataset))} == {np.int32(8)}  # hashable, as numpy scalars
    assert pickle.loads(pickle.dumps(first)) == 8
    assert [type(value) for value in dataset.as_numpy_iterator()] == [np.int32, np.int32]
    flag = next(iter(tf.data.Dataset.from_tensor_slices([True])))
    assert flag.numpy() is np.True_ and same_elements((first, flag), (np.int32(8), np.True_))
    batch = next(iter(dataset.batch(2)))
    assert isinstance(batch, np.ndarray) and (batch * 2).numpy().tolist() == [16, 6]


def test_the_iterator_keeps_its_position() -> None:
    dataset = tf.data.Dataset.range(5).shuffle(5, seed=3)
    iterator = iter(dataset)
    next(iterator)
    state = iterator.get_state()
    rest = [value.numpy() for value in iterator]
    again = iter(dataset)
    again.set_state(state)
    assert [value.numpy() for value in again] == rest


def test_elements_with_nothing_numpy_are_not_walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A record read in a Python loop costs about 1.8 us; walking it for numpy leaves cost 0.5 us more (+25% on a
    # sequential TFRecord read). Records (bytes) come out as the pipeline made them, without the walk; elements
    # with numpy leaves are still walked, once each.
    path = str(tmp_path / "records.tfrecord")
    with TFRecordWriter(path) as writer:
        for record in (b"a", b"", b"\x00c"):
            writer.write(record)
    walks = []

    def counting_walk(fn: Any, structure: Any) -> Any:
        walks.append(structure)
        return map_structure(fn, structure)

    monkeypatch.setattr(_eager, "map_structure", counting_walk)
    assert list(tf.data.TFRecordDataset(path)) == [b"a", b"", b"\x00c"]
    assert walks == []
    assert [value.numpy() for value in tf.data.Dataset.from_tensor_slices([8, 3])] == [8, 3]
    assert len(walks) == 2
