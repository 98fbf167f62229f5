"""``tf.contrib.data`` (TF 1): the fused ops, at their TF 2 home ``tf.data.experimental``."""

from __future__ import annotations

from typing import Any

from stratagem.data.experimental import map_and_batch, shuffle_and_repeat
from stratagem.tf._refusal import missing_name


def __getattr__(name: str) -> Any:
    raise missing_name("tf.contrib.data", name)


__all__ = ["map_and_batch", "shuffle_and_repeat"]
