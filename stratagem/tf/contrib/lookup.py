"""``tf.contrib.lookup`` (TF 1): ``index_table_from_tensor`` (``stratagem.lookup``'s)."""

from __future__ import annotations

from stratagem.lookup import index_table_from_tensor
from stratagem.tf._refusal import module_getattr

__getattr__ = module_getattr("tf.contrib.lookup")
__all__ = ["index_table_from_tensor"]
