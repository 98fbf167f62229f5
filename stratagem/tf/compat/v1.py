"""``tf.compat.v1``: TF 1's names. Those TF 2 kept resolve to ``stratagem.tf``'s; graph mode refuses with the reason.

Sessions, placeholders, graphs and variable scopes have no eager equivalent: the refusal says to write the TF 2 form.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, NamedTuple

import numpy as np
import torch

from stratagem.tf._refusal import GRAPH_MODE, missing_name


class SparseStrings(NamedTuple):
    """What TF 1's ``string_split`` returns: a ``SparseTensor``'s ``indices``, ``values`` and ``dense_shape``."""

    indices: torch.Tensor
    values: np.ndarray
    dense_shape: torch.Tensor


def string_split(source: Any, sep: Any = None, skip_empty: bool = True, delimiter: Any = None,
                 result_type: str = "SparseTensor", name: str | None = None) -> SparseStrings:
    """TF 1's ``tf.string_split`` of a 1-D ``source`` on any character of ``delimiter`` (a space).

    ``.values`` is a numpy array of bytes, one entry per piece, row after row.
    """
    if result_type != "SparseTensor":
        raise ValueError(f"string_split returns a SparseTensor here. Received: result_type={result_type!r}")
    characters = _text(delimiter if delimiter is not None else sep if sep is not None else " ")
    rows = [_text(s) for s in (source.tolist() if isinstance(source, np.ndarray) else source)]
    pieces = [re.split(f"[{re.escape(characters)}]", row) if characters else list(row) for row in rows]
    pieces = [[p for p in row if p or not skip_empty] for row in pieces]
    indices = [(i, j) for i, row in enumerate(pieces) for j in range(len(row))]
    values = np.array([p.encode() for row in pieces for p in row], dtype=np.bytes_)
    width = max((len(row) for row in pieces), default=0)
    return SparseStrings(torch.tensor(indices, dtype=torch.int64).reshape(-1, 2), values,
                         torch.tensor([len(pieces), width], dtype=torch.int64))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def __getattr__(name: str) -> Any:
    if name in GRAPH_MODE:
        raise missing_name("tf.compat.v1", name)
    tf = importlib.import_module("stratagem.tf")
    try:
        return getattr(tf, name)
    except AttributeError:
        raise missing_name("tf.compat.v1", name) from None


__all__ = ["string_split"]
