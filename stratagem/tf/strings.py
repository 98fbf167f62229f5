"""``tf.strings``: ``stratagem.strings``'s ops on strings (Python bytes, as ``stratagem.data`` holds them)."""

from __future__ import annotations

from typing import Any

from stratagem.strings import split
from stratagem.tf._refusal import missing_name


def __getattr__(name: str) -> Any:
    raise missing_name("tf.strings", name)


__all__ = ["split"]
