"""Parsing ``tf.train.Example`` records into arrays: feature specs, ``parse_example``, ``decode_raw``.

TF's ``tf.io`` parsing names and rules, on protobuf's own parser. Values are numpy arrays: ``float32``, ``int64``, and
object arrays of ``bytes`` (numpy's fixed-width bytes would drop trailing zeros). Where TF returns a ``SparseTensor``
(``VarLenFeature``), the values come dense, padded with zeros (``b""``), with each example's count under
``"<key>_lengths"`` (int64): a batch gives ``[batch, longest]`` values and ``[batch]`` lengths.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from stratagem.data.example_proto import Example
from stratagem.data.tfrecord_format import record_bytes

LENGTHS_SUFFIX = "_lengths"
_KINDS = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}
_TYPE_NAMES = {"float_list": "float", "int64_list": "int64", "bytes_list": "string"}
_NUMPY = {"float_list": np.float32, "int64_list": np.int64, "bytes_list": object}
_PADDING = {"float_list": 0.0, "int64_list": 0, "bytes_list": b""}


class FixedLenFeature(NamedTuple):
    """A feature with a fixed number of values (``tf.io.FixedLenFeature``).

    Args:
        shape: The shape of the values (``[]`` for one value).
        dtype: ``float32``, ``int64`` or ``string`` (TF's, numpy's or torch's names).
        default_value: Used when an example lacks the feature (None: the feature is required).
    """

    shape: Sequence[int]
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A feature with any number of ``dtype`` values (``tf.io.VarLenFeature``), parsed as padded values plus lengths."""

    dtype: Any


class FixedLenSequenceFeature(NamedTuple):
    """Any number of items of a fixed shape (``tf.io.FixedLenSequenceFeature``): values ``[n, *shape]``.

    A batch is padded to its longest example with ``default_value`` (zeros if None).

    Args:
        shape: The shape of one item.
        dtype: ``float32``, ``int64`` or ``string``.
        allow_missing: Must be True, as in TF (a missing feature is zero items).
        default_value: The padding of a batch.
    """

    shape: Sequence[int]
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


def parse_single_example(serialized: Any, features: Mapping[str, Any], example_names: Any = None,
                         name: str | None = None) -> dict[str, Any]:
    """Parses one serialized ``tf.train.Example`` (``tf.io.parse_single_example``).

    Args:
        serialized: The record (``bytes``, e.g. an element of ``TFRecordDataset``).
        features: Feature key to ``FixedLenFeature``, ``VarLenFeature`` or ``FixedLenSequenceFeature``.
        example_names: Accepted for TF's signature.
        name: Accepted for TF's signature.

    Returns:
        A dict of numpy arrays, one per key (plus ``"<key>_lengths"`` per ``VarLenFeature``).

    Raises:
        ValueError: A required feature is missing, has the wrong number of values or type, or the record is not an
            Example.

    Example:
        >>> spec = {"label": FixedLenFeature([], "int64"), "x": FixedLenFeature([2], "float32")}
        >>> parsed = parse_single_example(record, spec)
    """
    batch = parse_example([record_bytes(serialized)], features)
    return {key: value[0] for key, value in batch.items()}


def parse_example(serialized: Any, features: Mapping[str, Any], example_names: Any = None,
                  name: str | None = None) -> dict[str, Any]:
    """Parses a batch of serialized ``tf.train.Example`` records (``tf.io.parse_example``).

    Each value has the batch as its first axis; variable-length values are padded to the longest example.

    Args:
        serialized: A 1-D array or list of records (a ``batch`` of ``TFRecordDataset``).
        features: Feature key to a feature spec.
        example_names: Accepted for TF's signature.
        name: Accepted for TF's signature.

    Returns:
        A dict of numpy arrays.

    Raises:
        ValueError: As ``parse_single_example``, naming the example's index.

    Example:
        >>> ds = TFRecordDataset(files).batch(256).map(lambda records: parse_example(records, spec))
    """
    if isinstance(serialized, (bytes, str)) or (isinstance(serialized, np.ndarray) and serialized.ndim == 0):
        return parse_single_example(serialized, features)
    plans = [_plan(key, spec, features) for key, spec in features.items()]
    feature_maps = _feature_maps([record_bytes(record) for record in serialized])
    out: dict[str, Any] = {}
    for plan in plans:
        out.update(plan.assemble(plan.column(feature_maps), len(feature_maps)))
    return out


def _feature_maps(records: list[bytes]) -> list[Any]:
    """Each record's ``features.feature`` map, parsed by protobuf."""
    try:
        return [Example.FromString(record).features.feature for record in records]
    except Exception:  # protobuf's DecodeError; its module path differs between protobuf releases
        for index, record in enumerate(records):
            _parse_record(record, index)  # raises, naming the record
        raise


class _Plan:
    """How one key is read from each example and assembled into a batch array."""

    def __init__(self, key: str, kind: str, spec: Any) -> None:
        self.key, self.kind, self.spec = key, kind, spec
        self.shape = tuple(int(d) for d in getattr(spec, "shape", ()))
        self.size = math.prod(self.shape)
        self.dtype = _NUMPY[kind]
        self.default = self._default()
        self._getter = operator.attrgetter(f"{kind}.value")

    def _default(self) -> Any:
        value = getattr(self.spec, "default_value", None)
        if value is None:
            return None
        array = np.asarray(value, dtype=self.dtype)
        if isinstance(self.spec, FixedLenSequenceFeature):
            return array.reshape(()) if array.size == 1 else _bad_spec(self.key, "its default_value must be a "
                                                                      "scalar (the padding)", value)
        if array.size == 1 and self.size != 1:
            array = np.full(self.shape, array.reshape(()), dtype=self.dtype)
        if array.size != self.size:
            return _bad_spec(self.key, f"its default_value must have shape {list(self.shape)}", value)
        return array.reshape(self.shape)

    def column(self, feature_maps: list[Any]) -> list[Any]:
        """This key's values in each example (None where absent), by C-level getters: this loop is the parsing cost."""
        features = [feature_map.get(self.key) for feature_map in feature_maps]
        if None in features:
            values = [None if feature is None else getattr(feature, self.kind).value for feature in features]
            for index, feature in enumerate(features):
                if feature is None and self.default is None and isinstance(self.spec, FixedLenFeature):
                    raise ValueError(f"Feature: {self.key} (data type: {_TYPE_NAMES[self.kind]}) is required but could "
                                     f"not be found in example {index}. Give the FixedLenFeature a default_value, or "
                                     f"fix the data. Received: example {index} without key {self.key!r}")
        else:
            values = list(map(self._getter, features))
        lengths = [0 if v is None else len(v) for v in values]
        expected = self.size if isinstance(self.spec, FixedLenFeature) else None
        if expected is None or lengths.count(expected) != len(lengths):
            for index, (feature, length) in enumerate(zip(features, lengths)):
                if feature is not None and (length == 0 or expected is not None and length != expected):
                    self._check(feature, values[index], index)
        return values

    def _check(self, feature: Any, values: Any, index: int) -> None:
        found = feature.WhichOneof("kind")
        if found is not None and found != self.kind:
            raise ValueError(f"Key: {self.key}, example {index}. Data types don't match. Data type: "
                             f"{_TYPE_NAMES[found]} but expected type: {_TYPE_NAMES[self.kind]}. Received: a {found} "
                             f"where the spec has dtype {_TYPE_NAMES[self.kind]}")
        if isinstance(self.spec, FixedLenFeature) and len(values) != self.size:
            raise ValueError(
                f"Key: {self.key}, example {index}. Number of {_TYPE_NAMES[self.kind]} values != expected. "
                f"Values size: {len(values)} but output shape: {list(self.shape)}. Fix the data or the spec's "
                f"shape (a VarLenFeature takes any number). Received: {len(values)} values"
            )

    def assemble(self, column: list[Any], batch_size: int) -> dict[str, Any]:
        if isinstance(self.spec, FixedLenFeature):
            return {self.key: self._fixed(column, batch_size)}
        lengths = np.array([0 if values is None else len(values) for values in column], dtype=np.int64)
        if isinstance(self.spec, FixedLenSequenceFeature):
            return {self.key: self._sequence(column, lengths, batch_size)}
        return {self.key: self._padded(column, lengths, batch_size, (), _PADDING[self.kind]),
                self.key + LENGTHS_SUFFIX: lengths}

    def _fixed(self, column: list[Any], batch_size: int) -> Any:
        if None not in column:
            flat = list(itertools.chain.from_iterable(column))
            return _array(flat, self.dtype).reshape((batch_size, *self.shape))
        out = np.empty((batch_size, *self.shape), dtype=self.dtype)
        for row, values in enumerate(column):
            out[row] = self.default if values is None else _array(values, self.dtype).reshape(self.shape)
        return out

    def _sequence(self, column: list[Any], lengths: np.ndarray, batch_size: int) -> Any:
        item = max(self.size, 1)
        bad = np.flatnonzero(lengths % item) if self.size else np.flatnonzero(lengths)
        if bad.size:
            raise ValueError(
                f"Key: {self.key}, example {int(bad[0])}. Number of values must be a multiple of {item}, the size of "
                f"the FixedLenSequenceFeature's shape {list(self.shape)}. Received: {int(lengths[bad[0]])} values")
        padding = _PADDING[self.kind] if self.default is None else self.default
        return self._padded(column, lengths // item, batch_size, self.shape, padding)

    def _padded(self, column: list[Any], steps: np.ndarray, batch_size: int, item_shape: tuple[int, ...],
                padding: Any) -> Any:
        longest = int(steps.max()) if batch_size else 0
        out = np.full((batch_size, longest, *item_shape), padding, dtype=self.dtype)
        for row, values in enumerate(column):
            if values is not None and len(values):
                out[row, :steps[row]] = _array(values, self.dtype).reshape((int(steps[row]), *item_shape))
        return out


def _plan(key: str, spec: Any, features: Mapping[str, Any]) -> _Plan:
    if not isinstance(spec, (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature)):
        raise TypeError(f"features[{key!r}] must be a FixedLenFeature, VarLenFeature or FixedLenSequenceFeature. "
                        f"Received: {spec!r}")
    if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
        _bad_spec(key, "FixedLenSequenceFeature needs allow_missing=True, as in TF", spec.allow_missing)
    if isinstance(spec, VarLenFeature) and key + LENGTHS_SUFFIX in features:
        _bad_spec(key, f"its lengths are returned under {key + LENGTHS_SUFFIX!r}, which is another key of the "
                  f"spec; rename one of them", key + LENGTHS_SUFFIX)
    return _Plan(key, feature_kind(spec.dtype, key), spec)


def feature_kind(dtype: Any, key: str = "") -> str:
    """The ``Feature`` field (``"float_list"``, ``"int64_list"`` or ``"bytes_list"``) that holds ``dtype``."""
    name = str(getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or dtype).lower()
    name = name.removeprefix("torch.").removeprefix("tf.")
    name = {"float": "float32", "str": "string", "bytes": "string", "bytes_": "string", "object": "string",
            "object_": "string"}.get(name, name)
    if name not in _KINDS:
        raise ValueError(f"Feature {key!r}: dtype must be float32, int64 or string, the three types a tf.train.Example "
                         f"holds (parse, then cast). Received: dtype={dtype!r}")
    return _KINDS[name]


def _bad_spec(key: str, problem: str, received: Any) -> Any:
    raise ValueError(f"Feature {key!r}: {problem}. Received: {received!r}")


def _array(values: Any, dtype: Any) -> np.ndarray:
    if dtype is object:
        out = np.empty(len(values), dtype=object)
        out[:] = list(values)
        return out
    return np.array(values, dtype=dtype)


def _parse_record(record: bytes, index: int) -> Any:
    try:
        return Example.FromString(record)
    except Exception as err:  # protobuf's DecodeError; its module path differs between protobuf releases
        raise ValueError(f"Could not parse example input {index} as a tf.train.Example ({type(err).__name__}: {err}). "
                         "Is the file a TFRecord of Examples (not SequenceExamples or another message)? Received: a "
                         f"record of {len(record)} bytes") from err


def decode_raw(input_bytes: Any, out_type: Any, little_endian: bool = True, fixed_length: int | None = None,
               name: str | None = None) -> np.ndarray:
    """Reinterprets bytes as numbers (``tf.io.decode_raw``).

    A ``bytes`` gives a 1-D array, an array of them its shape plus one axis; lengths must agree unless ``fixed_length``.

    Args:
        input_bytes: ``bytes`` or an array / list of them.
        out_type: The element type (numpy, torch or TF name, e.g. ``"uint8"``).
        little_endian: Byte order of the input.
        fixed_length: Bytes per input (None: each input's own length).
        name: Accepted for TF's signature.

    Raises:
        ValueError: If an input's length is not a multiple of the type's size, or inputs differ in length without
            ``fixed_length``.

    Example:
        >>> decode_raw(parsed["image"], "uint8").reshape(28, 28)
    """
    dtype = np.dtype(_numpy_name(out_type)).newbyteorder("<" if little_endian else ">")
    if isinstance(input_bytes, (bytes, str)) or (isinstance(input_bytes, np.ndarray) and input_bytes.ndim == 0):
        return _decode_one(record_bytes(input_bytes), dtype, fixed_length).astype(dtype.newbyteorder("="))
    items = np.asarray(input_bytes, dtype=object)
    rows = [_decode_one(record_bytes(item), dtype, fixed_length) for item in items.reshape(-1)]
    lengths = {row.size for row in rows}
    if len(lengths) > 1:
        raise ValueError(f"decode_raw needs inputs of one length (or fixed_length=). Received: lengths "
                         f"{sorted(lengths)} in bytes / {dtype.itemsize}")
    width = lengths.pop() if lengths else 0
    out = np.stack(rows) if rows else np.empty((0, width), dtype=dtype)
    return out.reshape((*items.shape, width)).astype(dtype.newbyteorder("="))


def _decode_one(data: bytes, dtype: np.dtype, fixed_length: int | None) -> np.ndarray:
    if fixed_length is not None:
        data = data[:fixed_length].ljust(int(fixed_length), b"\0")
    if len(data) % dtype.itemsize:
        raise ValueError(f"Input to decode_raw has length {len(data)} that is not a multiple of {dtype.itemsize}, the "
                         f"size of {dtype.name}. Received: {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype)


def _numpy_name(dtype: Any) -> str:
    if isinstance(dtype, (np.dtype, type)):
        return np.dtype(dtype).name
    name = str(getattr(dtype, "name", None) or dtype).removeprefix("torch.").removeprefix("tf.")
    try:
        return np.dtype(name).name
    except TypeError as err:
        raise ValueError(f"decode_raw's out_type must be a numeric type numpy knows (e.g. uint8, float32). "
                         f"Received: out_type={dtype!r}") from err
