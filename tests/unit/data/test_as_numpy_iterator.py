"""``as_numpy_iterator`` yields what TF 2.21's does (issue 21 item 7).

The expected values and types are what TF 2.21 printed for the same pipelines
(``type(v).__name__``, ``repr(v)``): numpy scalars for 0-d elements (hashable),
Python ``bytes`` for strings, ``object`` arrays of ``bytes`` for string batches,
structures kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stratagem.data import Dataset, TextLineDataset


def _kinds(element: object) -> object:
    """Each leaf as (type name, value), the way the TF run was printed."""
    if isinstance(element, dict):
        return {key: _kinds(value) for key, value in element.items()}
    if isinstance(element, tuple):
        return tuple(_kinds(value) for value in element)
    if isinstance(element, np.ndarray):
        return ("ndarray", str(element.dtype), element.tolist())
    return (type(element).__name__, element)


def test_scalars_are_numpy_scalars_as_tf() -> None:
    assert [_kinds(v) for v in Dataset.range(2).as_numpy_iterator()] == [("int64", 0), ("int64", 1)]
    assert [_kinds(v) for v in Dataset.from_tensor_slices(np.array([1, 2], np.int32)).as_numpy_iterator()] == \
        [("int32", 1), ("int32", 2)]
    assert [_kinds(v) for v in Dataset.from_tensor_slices(np.array([1.5], np.float32)).as_numpy_iterator()] == \
        [("float32", 1.5)]
    assert [_kinds(v) for v in Dataset.from_tensor_slices(np.array([True])).as_numpy_iterator()] == [("bool", True)]
    assert [_kinds(v) for v in Dataset.range(2).map(lambda x: x * 2).as_numpy_iterator()] == \
        [("int64", 0), ("int64", 2)]
    assert set(Dataset.range(3).as_numpy_iterator()) == {0, 1, 2}  # TF: {np.int64(0), np.int64(1), np.int64(2)}


def test_strings_are_bytes_as_tf(tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("hello\nworld\n")
    assert [line.decode() for line in TextLineDataset(str(lines)).as_numpy_iterator()] == ["hello", "world"]
    assert [_kinds(v) for v in Dataset.from_tensor_slices(["a", "bc"]).as_numpy_iterator()] == \
        [("bytes", b"a"), ("bytes", b"bc")]
    batches = list(Dataset.from_tensor_slices(["a", "bc", "d", "e"]).batch(2).as_numpy_iterator())
    assert [_kinds(b) for b in batches] == [("ndarray", "object", [b"a", b"bc"]), ("ndarray", "object", [b"d", b"e"])]


def test_structures_are_kept_as_tf() -> None:
    nested = Dataset.from_tensor_slices(((np.array([1, 2]), ["p", "q"]), {"b": np.array([[1.0, 2.0], [3.0, 4.0]])}))
    assert [_kinds(v) for v in nested.as_numpy_iterator()] == [
        ((("int64", 1), ("bytes", b"p")), {"b": ("ndarray", "float64", [1.0, 2.0])}),
        ((("int64", 2), ("bytes", b"q")), {"b": ("ndarray", "float64", [3.0, 4.0])}),
    ]
    assert [_kinds(v) for v in Dataset.range(4).batch(2).as_numpy_iterator()] == \
        [("ndarray", "int64", [0, 1]), ("ndarray", "int64", [2, 3])]
    assert [_kinds(v) for v in Dataset.from_tensor_slices({"a": np.array([1]), "s": ["x"]}).as_numpy_iterator()] == \
        [{"a": ("int64", 1), "s": ("bytes", b"x")}]
