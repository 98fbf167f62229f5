"""``GeneratorDataset``: the elements of a Python generator, called anew for every epoch.

The state is the number of elements consumed: restoring calls ``generator()`` again and discards that many
(O(position)), so a generator that yields a different sequence on every call cannot be restored exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from stratagem.data._python_values import from_python
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import DatasetIterator, IterContext


class GeneratorDataset(Dataset):
    """Elements of ``generator()``; see ``Dataset.from_generator``.

    Python scalars and lists become numpy arrays with TF's dtypes (int32, float32, bytes); arrays and tensors pass.

    Args:
        generator: A callable returning an iterable, called with ``args`` once per epoch (and to restore a position).
        output_signature: Optional structure matching the elements, each leaf a dtype (``"float32"``, ``np.int64``,
            ``torch.float32``, ``tf.float32``), a ``(shape, dtype)`` pair as in ``Dataset.element_spec``, or a
            ``tf.TensorSpec``, with None for a dimension of any size. Leaves are cast to the dtype (a torch or ``tf``
            dtype gives a torch tensor, ``tf.string`` bytes) and their shapes are checked.
        output_types: TF's older form: the structure of dtypes alone.
        output_shapes: With ``output_types``: the same structure of shapes.
        args: Values passed to ``generator``, converted as TF does (``str`` -> ``bytes``, int -> numpy int32).

    Raises:
        TypeError: If ``generator`` is not callable, a leaf of the signature is not a dtype, ``(shape, dtype)`` pair or
            spec, or ``output_signature`` is given with ``output_types``/``output_shapes``.

    Example:
        >>> ds = Dataset.from_generator(lambda: iter(range(3)))
        >>> [int(x) for x in ds]
        [0, 1, 2]
    """

    def __init__(self, generator: Callable[..., Iterable[Any]], output_signature: Any = None, *,
                 output_types: Any = None, output_shapes: Any = None, args: Sequence[Any] | None = None) -> None:
        super().__init__()
        if not callable(generator):
            raise TypeError("generator must be a callable that returns an iterable (tf.data calls it once per epoch). "
                            f"Received: generator of type {type(generator).__name__}")
        self._generator = generator
        self._args = tuple(_argument(value) for value in (args or ()))
        self._signature = _signature(output_signature, output_types, output_shapes)

    def _streaming_iterator(self, ctx: IterContext) -> DatasetIterator:
        return _GeneratorIterator(self)

    def convert(self, element: Any, position: int) -> Any:
        """Python values to numpy (TF's dtypes); cast and shape-check against ``output_signature`` if given."""
        if self._signature is None:
            return from_python(element)
        # Python values go straight to the signature's dtype: 0.1 as float64 is not 0.1 as float32.
        return _apply_signature(element, self._signature, position, path="element")

    def __str__(self) -> str:
        return f"GeneratorDataset({getattr(self._generator, '__name__', 'generator')})"


class _GeneratorIterator(DatasetIterator):
    _CONSUMED = "num_consumed"

    def __init__(self, dataset: GeneratorDataset) -> None:
        self._dataset = dataset
        self._source: Iterator[Any] | None = None  # created lazily, so a restore calls generator() once
        self._consumed = 0

    def __next__(self) -> Any:
        if self._source is None:
            self._source = iter(self._dataset._generator(*self._dataset._args))
            self._replay(self._consumed)
        element = next(self._source)
        self._consumed += 1
        return self._dataset.convert(element, self._consumed - 1)

    def _replay(self, count: int) -> None:
        assert self._source is not None
        for skipped in range(count):
            try:
                next(self._source)
            except StopIteration:
                raise ValueError(
                    "Cannot restore a from_generator position: the generator ended before the saved position, so it "
                    "does not yield the same sequence on every call. Make generator() deterministic. Received: "
                    f"num_consumed={count}, generator yielded {skipped}") from None

    def get_state(self) -> dict[str, Any]:
        return {self._CONSUMED: self._consumed}

    def set_state(self, state: dict[str, Any]) -> None:
        self.close()
        self._consumed = int(state[self._CONSUMED])

    def close(self) -> None:
        source, self._source = self._source, None
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _signature(output_signature: Any, output_types: Any, output_shapes: Any) -> Any:
    """The parsed signature from TF's ``output_signature``, or its older ``output_types``/``output_shapes``."""
    if output_signature is not None and (output_types is not None or output_shapes is not None):
        raise TypeError("Pass output_signature, or output_types (with optional output_shapes), not both, as "
                        f"tf.data requires. Received: output_signature={output_signature!r}, "
                        f"output_types={output_types!r}, output_shapes={output_shapes!r}")
    if output_shapes is not None and output_types is None:
        raise TypeError(f"output_shapes needs output_types, as in tf.data. Received: output_shapes={output_shapes!r}")
    if output_types is not None:
        return _parse_signature(_pair(output_types, output_shapes))
    return None if output_signature is None else _parse_signature(output_signature)


def _pair(types: Any, shapes: Any) -> Any:
    """``output_types`` and ``output_shapes`` (same structure) as one structure of ``(shape, dtype)`` leaves."""
    if shapes is None:
        return types
    if _is_dtype(types):
        return (tuple(shapes), types)
    if isinstance(types, dict):
        return {key: _pair(value, shapes[key]) for key, value in types.items()}
    if isinstance(types, (tuple, list)) and isinstance(shapes, (tuple, list)) and len(types) == len(shapes):
        return tuple(_pair(t, s) for t, s in zip(types, shapes))
    raise ValueError(f"output_shapes must have the structure of output_types. Received: output_types={types!r}, "
                     f"output_shapes={shapes!r}")


def _argument(value: Any) -> Any:
    # tf.data passes args to the generator as numpy values: str -> bytes, 1 -> np.int32(1), a tensor -> an array.
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    converted = from_python(value)
    return converted[()] if isinstance(converted, np.ndarray) and converted.ndim == 0 else converted


def _is_dtype(value: Any) -> bool:
    if isinstance(value, torch.dtype) or hasattr(value, "as_torch_dtype"):  # a torch dtype or a tf.DType
        return True
    if isinstance(value, (str, np.dtype, type)):
        try:
            np.dtype(value)
        except TypeError:
            return False
        return True
    return False


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list, torch.Size)) and all(d is None or isinstance(d, int) for d in value)


def _parse_signature(signature: Any) -> Any:
    """Leaves become ``(shape or None, dtype)``; structure is kept."""
    if _is_dtype(signature):
        return (None, signature)
    if _is_dtype(getattr(signature, "dtype", None)) and hasattr(signature, "shape"):  # a tf.TensorSpec
        shape = signature.shape
        return (None if getattr(shape, "rank", 0) is None else tuple(shape), signature.dtype)
    if isinstance(signature, tuple) and len(signature) == 2 and _is_shape(signature[0]) and _is_dtype(signature[1]):
        return (tuple(signature[0]), signature[1])
    if isinstance(signature, dict):
        return {key: _parse_signature(value) for key, value in signature.items()}
    if isinstance(signature, (tuple, list)):
        return _Structure(_parse_signature(value) for value in signature)
    raise TypeError(f"Each leaf of output_signature must be a dtype or a (shape, dtype) pair. Received: {signature!r} "
                    f"of type {type(signature).__name__}")


class _Structure(tuple):
    """A tuple node of a parsed signature (as opposed to a ``(shape, dtype)`` leaf)."""


def _apply_signature(element: Any, spec: Any, position: int, *, path: str) -> Any:
    if isinstance(spec, dict) or isinstance(spec, _Structure):
        keys = list(spec) if isinstance(spec, dict) else list(range(len(spec)))
        same = isinstance(element, dict) if isinstance(spec, dict) else isinstance(element, (tuple, list))
        if not same or len(element) != len(keys) or (isinstance(spec, dict) and set(element) != set(keys)):
            raise ValueError(f"from_generator element {position} does not match output_signature at {path}. Received: "
                             f"{type(element).__name__} {_describe(element)}, expected {len(keys)} components {keys}")
        parts = {key: _apply_signature(element[key], spec[key], position, path=f"{path}[{key!r}]") for key in keys}
        return parts if isinstance(spec, dict) else tuple(parts[i] for i in keys)
    return _cast_leaf(element, spec, position, path)


def _cast_leaf(leaf: Any, spec: tuple[tuple[int | None, ...] | None, Any], position: int, path: str) -> Any:
    shape, dtype = spec
    if hasattr(dtype, "as_torch_dtype"):  # a tf.DType: a torch tensor as TF gives a tensor; tf.string gives bytes
        if dtype.as_torch_dtype is None:
            leaf = leaf.encode() if isinstance(leaf, str) else from_python(leaf)
            return _check_shape(leaf, shape, position, path)
        dtype = dtype.as_torch_dtype
    if isinstance(dtype, torch.dtype):
        leaf = torch.as_tensor(np.asarray(leaf) if not isinstance(leaf, torch.Tensor) else leaf).to(dtype)
    else:
        leaf = np.asarray(leaf.detach().cpu() if isinstance(leaf, torch.Tensor) else leaf, dtype=dtype)
    return _check_shape(leaf, shape, position, path)


def _check_shape(leaf: Any, shape: tuple[int | None, ...] | None, position: int, path: str) -> Any:
    actual = tuple(np.shape(leaf))
    if shape is not None and (len(actual) != len(shape) or any(e is not None and e != a for a, e in zip(actual, shape))):
        raise ValueError(f"from_generator element {position} has the wrong shape at {path}: output_signature expects "
                         f"{shape} (None matches any size). Received: shape {actual}")
    return leaf


def _describe(element: Any) -> str:
    if isinstance(element, dict):
        return f"with keys {sorted(map(str, element))}"
    if isinstance(element, (tuple, list)):
        return f"of length {len(element)}"
    return f"of shape {tuple(np.shape(element))}"
