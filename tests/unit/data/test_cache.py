"""cache: in memory and in .npz files; first pass records, later passes read; states; corrupt files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from stratagem.data import Dataset
from stratagem.errors import CheckpointError
from stratagem.testing.data import assert_checkpoint_roundtrip
from tests.unit.data._helpers import as_python, python_values




class _Counted:
    """A source that counts how often its elements are produced."""

    def __init__(self, n: int) -> None:
        self.n, self.produced, self.calls = n, 0, 0

    def generator(self) -> Any:
        self.calls += 1
        for i in range(self.n):
            self.produced += 1
            yield i

    def mapped(self) -> Dataset:
        def count(x: Any) -> Any:
            self.produced += 1
            return x

        return Dataset.range(self.n).map(count)

    def streaming(self) -> Dataset:
        return Dataset.from_generator(self.generator)


@pytest.fixture(params=["memory", "file"])
def filename(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "" if request.param == "memory" else str(tmp_path / "cache" / "data")


@pytest.mark.parametrize("kind", ["mapped", "streaming"])
def test_cache_runs_parent_once_over_epochs(filename: str, kind: str) -> None:
    source = _Counted(5)
    ds = getattr(source, kind)().cache(filename)
    assert python_values(ds) == [0, 1, 2, 3, 4]
    produced = source.produced
    # One call per element; an in-memory cache of the mapped source fills in chunks and adds one try under vmap,
    # refused (the map returns its numpy input, which vmap would give as a tensor: map.py, _per_row.py).
    assert produced == (6 if kind == "mapped" and not filename else 5)
    assert python_values(ds) == python_values(ds) == [0, 1, 2, 3, 4]
    assert source.produced == produced


@pytest.mark.parametrize("kind", ["mapped", "streaming"])
def test_cache_round_trips(filename: str, kind: str) -> None:
    assert_checkpoint_roundtrip(getattr(_Counted(6), kind)().cache(filename))


def test_partial_first_pass_records_nothing(filename: str) -> None:
    source = _Counted(4)
    ds = source.streaming().cache(filename)
    iterator = iter(ds)
    next(iterator), next(iterator)
    iterator.close()
    if filename:
        assert not os.path.exists(filename + ".index.json")
    assert python_values(ds) == [0, 1, 2, 3]  # a fresh full pass that records
    assert python_values(ds) == [0, 1, 2, 3]
    assert source.calls == 2


def test_cache_freezes_upstream_shuffle(filename: str) -> None:
    ds = Dataset.range(8).shuffle(8, seed=1, reshuffle_each_iteration=True).cache(filename)
    first, second = python_values(ds), python_values(ds)
    assert first == second and sorted(first) == list(range(8))
    streaming = _Counted(8).streaming().shuffle(4, seed=1).cache(filename + "2" if filename else "")
    assert python_values(streaming) == python_values(streaming)


def test_cache_keeps_structure_and_leaf_types(filename: str) -> None:
    ds = Dataset.range(3).map(lambda x: ({"ids": torch.arange(int(x) + 1), "name": np.str_(f"n{x}")}, (x, 2.5)))
    ds = ds.cache(filename)
    first, again = list(ds), list(ds)
    assert python_values(first) == python_values(again)
    element, pair = again[2]
    assert isinstance(element, dict) and isinstance(element["ids"], torch.Tensor) and element["ids"].tolist() == [0, 1, 2]
    # A list inside a map's result is one array in tf.data; a tuple is structure.
    assert isinstance(pair, tuple) and np.asarray(pair[1]).dtype == np.float32 and str(element["name"]) == "n2"
    assert_checkpoint_roundtrip(ds)


def test_random_access_cache_stays_random_access() -> None:
    source = _Counted(6)
    ds = source.mapped().cache()
    assert ds.cardinality() == 6
    shuffled = ds.shuffle(6, seed=0)
    assert sorted(python_values(shuffled)) == list(range(6))
    # The first pass fills the cache, one call per element (and one refused try under vmap, map.py); later passes
    # never run the map again.
    produced = source.produced
    assert produced == 6 + 1
    assert sorted(python_values(shuffled)) == list(range(6))
    assert python_values(ds.batch(4)) == [(0, 1, 2, 3), (4, 5)]
    assert source.produced == produced


def test_cache_of_infinite_input_passes_through() -> None:
    ds = Dataset.range(3).repeat().cache()
    assert ds.cardinality() == -1
    assert python_values(ds.take(5)) == [0, 1, 2, 0, 1]


def test_streaming_cache_cardinality_is_unknown() -> None:
    assert _Counted(3).streaming().cache().cardinality() == -2


def test_fill_state_restores_into_new_iterator(filename: str) -> None:
    ds = _Counted(5).streaming().cache(filename)
    iterator = iter(ds)
    next(iterator), next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    assert state["mode"] == "fill" and state["position"] == 2
    restored = ds.iterator(seed=99, epoch=4)
    restored.set_state(state)
    assert python_values(restored) == [2, 3, 4]
    assert python_values(iterator) == [2, 3, 4]  # the original completes its pass and records it
    reader = iter(ds)
    assert reader.get_state()["mode"] == "read" and python_values(reader) == [0, 1, 2, 3, 4]


def test_read_state_rebuilds_lost_memory_cache() -> None:
    first = _Counted(5).streaming().shuffle(5, seed=2).cache()
    expected = python_values(first)
    iterator = iter(first)
    next(iterator)
    state = iterator.get_state()
    fresh = _Counted(5).streaming().shuffle(5, seed=2).cache()  # as after a restart: nothing cached
    restored = iter(fresh)
    restored.set_state(state)
    assert python_values(restored) == expected[1:]


def test_file_cache_is_reused_by_a_new_pipeline(tmp_path: Path) -> None:
    prefix = str(tmp_path / "data")
    assert python_values(Dataset.range(4).map(lambda x: x * 3).cache(prefix)) == [0, 3, 6, 9]
    assert sorted(os.listdir(tmp_path)) == ["data.0.npz", "data.index.json"]

    def fail() -> Any:
        raise AssertionError("a complete cache must not run its input")

    assert python_values(Dataset.from_generator(fail).cache(prefix)) == [0, 3, 6, 9]


def test_file_cache_writes_nothing_before_the_pass_completes(tmp_path: Path) -> None:
    prefix = str(tmp_path / "data")
    iterator = iter(Dataset.from_generator(lambda: iter(range(600))).cache(prefix))
    for _ in range(300):  # past one chunk of 256
        next(iterator)
    assert not os.path.exists(prefix + ".index.json") and not os.path.exists(prefix + ".0.npz")
    iterator.close()
    assert os.listdir(tmp_path) == []  # temporary chunks removed


def test_file_cache_spans_several_chunks(tmp_path: Path) -> None:
    ds = Dataset.range(600).map(lambda x: x * 2).cache(str(tmp_path / "big"))
    assert python_values(ds.batch(600)) == [tuple(range(0, 1200, 2))]
    assert sorted(os.listdir(tmp_path)) == ["big.0.npz", "big.1.npz", "big.2.npz", "big.index.json"]
    assert python_values(ds.shuffle(600, seed=0).take(600).batch(600))[0] != tuple(range(0, 1200, 2))


def test_corrupt_chunk_file_raises_checkpoint_error_naming_it(tmp_path: Path) -> None:
    prefix = str(tmp_path / "data")
    list(Dataset.range(3).cache(prefix))
    with open(prefix + ".0.npz", "r+b") as f:
        f.truncate(40)
    with pytest.raises(CheckpointError, match=r"data\.0\.npz is corrupt or partially written.*Delete it"):
        list(Dataset.range(3).cache(prefix))


def test_corrupt_index_file_raises_checkpoint_error_naming_it(tmp_path: Path) -> None:
    prefix = str(tmp_path / "data")
    Path(prefix + ".index.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"data\.index\.json is corrupt.*Delete it"):
        list(Dataset.range(3).cache(prefix))


def test_pickled_chunk_is_refused_not_unpickled(tmp_path: Path) -> None:
    prefix = str(tmp_path / "data")
    list(Dataset.range(2).cache(prefix))
    np.savez(prefix + ".0.npz", **{"0_0": np.array([object()], dtype=object)})
    with pytest.raises(CheckpointError, match=r"data\.0\.npz is corrupt.*allow_pickle=False"):
        list(Dataset.range(2).cache(prefix))


def test_object_array_element_raises_type_error(tmp_path: Path) -> None:
    ds = Dataset.from_generator(lambda: iter([np.array([{"a": 1}], dtype=object)])).cache(str(tmp_path / "data"))
    with pytest.raises(TypeError, match="dtype=object"):
        list(ds)


def test_cache_filename_of_wrong_type_raises_type_error() -> None:
    with pytest.raises(TypeError, match="filename of type int"):
        Dataset.range(3).cache(3)  # type: ignore[arg-type]
