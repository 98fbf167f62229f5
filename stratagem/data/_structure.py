"""Elements are numpy arrays or torch tensors nested in tuples and dicts; helpers over them."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from stratagem._nest import map_structure
from stratagem.data._eager import plain_value


def leaves(structure: Any) -> list[Any]:
    """Leaves in depth-first order."""
    out: list[Any] = []
    map_structure(out.append, structure)
    return out


def nbytes(structure: Any) -> int:
    """Bytes held by the leaves (8 for a Python scalar)."""
    return int(sum(getattr(leaf, "nbytes", 8) for leaf in leaves(structure)))


def stack(elements: Sequence[Any], *, where: str = "batch") -> Any:
    """Stacks a list of same-structured elements along a new axis 0.

    Raises:
        ValueError: Naming both shapes and the element index when shapes differ.
    """
    first = elements[0]
    if isinstance(first, dict):
        return {key: stack([e[key] for e in elements], where=where) for key in first}
    if isinstance(first, (tuple, list)):
        return type(first)(stack([e[i] for e in elements], where=where) for i in range(len(first)))
    if type(first) is bytes:
        # Strings of arbitrary bytes (TFRecord records) as an object array: numpy's fixed-width
        # bytes dtype would drop their trailing zero bytes.
        out = np.empty(len(elements), dtype=object)
        out[:] = elements
        return out
    try:
        if isinstance(first, torch.Tensor):
            return torch.stack(list(elements))
        return np.stack(elements)
    except (ValueError, RuntimeError):
        _check_shapes(elements, where)  # names the offending element and both shapes
        raise


def _check_shapes(leaves_: Sequence[Any], where: str) -> None:
    shape0 = np.shape(leaves_[0])
    for i, leaf in enumerate(leaves_):
        if np.shape(leaf) != shape0:
            raise ValueError(
                f"Cannot {where} elements of different shapes: element 0 has shape {tuple(shape0)} but "
                f"element {i} has shape {tuple(np.shape(leaf))}. Use padded_batch() to pad them, or map() "
                f"them to one shape first. Received: shapes {tuple(shape0)} and {tuple(np.shape(leaf))} at index {i}"
            )


def unstack(structure: Any) -> list[Any]:
    """The rows of a batched structure, as a list of per-element structures (views, no copies)."""
    if isinstance(structure, tuple) and all(not isinstance(c, (tuple, list, dict)) for c in structure):
        return list(zip(*structure))  # the common (x, y) case: iterate each component's rows at C speed
    if not isinstance(structure, (tuple, list, dict)):
        return list(structure)
    return [take_rows(structure, i) for i in range(len(leaves(structure)[0]))]


def take_rows(structure: Any, rows: Any) -> Any:
    """Indexes axis 0 of every leaf (an int, a slice or an index array)."""
    return map_structure(lambda leaf: leaf[rows], structure)


_SELECT_MIN_ROW_BYTES = 256  # numpy rows smaller than this: numpy's fancy index beats the call into torch


def gather_rows(structure: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` (int64) of every leaf's axis 0, as new arrays (or tensors): ``leaf[rows]``'s values and types.

    Large rows are gathered by ``torch.index_select`` (on a numpy array too, through a shared view): 1.5-3x
    numpy's fancy index on 28x28 images, which copies row by row. A row keeps its memory layout (channels-last
    images stay channels-last), as torch's advanced indexing keeps it.
    """
    index = torch.from_numpy(rows)
    return map_structure(lambda leaf: _gather(leaf, rows, index), structure)


def _gather(leaf: Any, rows: np.ndarray, index: torch.Tensor) -> Any:
    try:
        if isinstance(leaf, torch.Tensor):
            return _select_rows(leaf, index)
        if (leaf.ndim >= 2 and leaf.flags.writeable and leaf.dtype.isnative
                and leaf.itemsize * math.prod(leaf.shape[1:]) >= _SELECT_MIN_ROW_BYTES):
            return _select_rows(torch.from_numpy(leaf), index).numpy()
    except (TypeError, ValueError, RuntimeError, IndexError):  # a dtype torch lacks, negative strides or rows
        pass
    return leaf[index] if isinstance(leaf, torch.Tensor) else leaf[rows]


def _select_rows(source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    # NOTE: index_select returns row-major strides. A batch must keep the source's layout: NCHW images with one
    # channel, made from an NHWC array by a transpose, have channels-last strides, and torch's conv and max-pool
    # choose their kernels by layout (a channels_first Keras CNN: 10 ms/step, 22 with the layout lost). Checked
    # after the select, which costs one stride comparison where the layouts agree (almost always).
    selected = torch.index_select(source, 0, index)
    if selected.stride() == source.stride() or source.dim() < 3 or not (
            source.is_contiguous() or source.is_contiguous(memory_format=torch.channels_last)
            or source.is_contiguous(memory_format=torch.channels_last_3d)):
        return selected
    # Each row is one dense block (dim 0 outermost): the source's strides fit any number of rows.
    return torch.empty_strided(selected.shape, source.stride(), dtype=source.dtype,
                               device=source.device).copy_(selected)


def to_numpy(structure: Any) -> Any:
    """Leaves as numpy arrays; a ``bytes`` leaf stays ``bytes``, as TF's ``as_numpy_iterator`` gives strings."""
    return map_structure(lambda leaf: leaf.detach().cpu().numpy() if isinstance(leaf, torch.Tensor) else
                         leaf if type(leaf) is bytes else np.asarray(leaf), structure)


def same_elements(a: Any, b: Any) -> bool:
    """Whether two structures are the same: containers, keys, leaf types, dtypes, shapes and values (NaN == NaN).

    A value a Python loop over a dataset gave (with TF's ``numpy()``) counts as its plain numpy value.
    """
    a, b = plain_value(a), plain_value(b)
    if isinstance(a, (tuple, list, dict)) or isinstance(b, (tuple, list, dict)):
        if type(a) is not type(b) or len(a) != len(b):
            return False
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same_elements(a[key], b[key]) for key in a)
        return all(same_elements(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return (a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
                and bool(torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                               and torch.equal(a.nan_to_num(), b.nan_to_num()))))
    if isinstance(a, (np.ndarray, np.generic)):
        numeric = a.dtype.kind in "fc"
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=numeric))
    return bool(a == b)


# Whether Keras may make tensors off the host: None until Keras is loaded, then decided once (its default is fixed).
_keras_leaves_host: bool | None = None


def call_with_element(fn: Any, element: Any) -> Any:
    """tf.data's calling convention: a tuple element is unpacked into positional arguments.

    As tf.data's, the function runs on the host: Keras ops in it make CPU tensors where Keras's device is a GPU.
    """
    global _keras_leaves_host
    args = element if isinstance(element, tuple) else (element,)
    if _keras_leaves_host is None and "keras" in sys.modules:
        from stratagem.models.keras_internals import keras_leaves_host  # here: stratagem.models imports us

        _keras_leaves_host = keras_leaves_host()
    if not _keras_leaves_host:
        return fn(*args)
    from stratagem.models.keras_internals import host_device

    on_host = host_device()
    if on_host is None:
        return fn(*args)
    with on_host:
        return fn(*args)


def spec_of(element: Any) -> Any:
    """A structure of ``(shape, dtype)`` pairs describing one element."""
    return map_structure(lambda leaf: (tuple(np.shape(leaf)), str(getattr(leaf, "dtype", type(leaf).__name__))), element)
