"""``tf.lookup``: ``stratagem.lookup``'s static tables."""

from __future__ import annotations

from typing import Any

from stratagem.lookup import KeyValueTensorInitializer, StaticHashTable
from stratagem.tf._refusal import missing_name


def __getattr__(name: str) -> Any:
    raise missing_name("tf.lookup", name)


__all__ = ["KeyValueTensorInitializer", "StaticHashTable"]
