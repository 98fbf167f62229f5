"""``tf.contrib.lookup`` (TF 1): ``index_table_from_tensor`` (``stratagem.lookup``'s)."""

from __future__ import annotations

from typing import Any

from stratagem.lookup import index_table_from_tensor
from stratagem.tf._refusal import missing_name


def __getattr__(name: str) -> Any:
    raise missing_name("tf.contrib.lookup", name)


__all__ = ["index_table_from_tensor"]
