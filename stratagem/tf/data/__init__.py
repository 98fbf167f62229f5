"""``tf.data``: ``stratagem.data``'s ``Dataset`` (the same class), ``Options`` and ``AUTOTUNE`` under TF's names."""

from __future__ import annotations

from typing import Any

from stratagem.data import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
    Dataset,
    Options,
    TextLineDataset,
    TFRecordDataset,
)
from stratagem.tf._refusal import missing_name
from stratagem.tf.data import experimental


def __getattr__(name: str) -> Any:
    raise missing_name("tf.data", name)


__all__ = ["AUTOTUNE", "Dataset", "INFINITE_CARDINALITY", "Options", "TFRecordDataset", "TextLineDataset",
           "UNKNOWN_CARDINALITY", "experimental"]
