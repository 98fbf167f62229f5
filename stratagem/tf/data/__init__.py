"""``tf.data``: ``stratagem.data``'s ``Dataset`` (the same class), ``Options`` and ``AUTOTUNE`` under TF's names."""

from __future__ import annotations

from stratagem.data import (
    AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset, Options, TextLineDataset, TFRecordDataset,
)
from stratagem.tf._refusal import module_getattr
from stratagem.tf.data import experimental

__getattr__ = module_getattr("tf.data")
__all__ = ["AUTOTUNE", "Dataset", "INFINITE_CARDINALITY", "Options", "TFRecordDataset", "TextLineDataset",
           "UNKNOWN_CARDINALITY", "experimental"]
