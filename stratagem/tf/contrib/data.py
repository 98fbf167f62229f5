"""``tf.contrib.data`` (TF 1): the fused ops, at their TF 2 home ``tf.data.experimental``."""

from __future__ import annotations

from stratagem.data.experimental import map_and_batch, shuffle_and_repeat
from stratagem.tf._refusal import module_getattr

__getattr__ = module_getattr("tf.contrib.data")
__all__ = ["map_and_batch", "shuffle_and_repeat"]
