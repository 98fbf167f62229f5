"""``tf.lookup``: ``stratagem.lookup``'s static tables."""

from __future__ import annotations

from stratagem.lookup import KeyValueTensorInitializer, StaticHashTable
from stratagem.tf._refusal import module_getattr

__getattr__ = module_getattr("tf.lookup")
__all__ = ["KeyValueTensorInitializer", "StaticHashTable"]
