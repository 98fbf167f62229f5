"""``stratagem.train.latest_checkpoint``, where ``tf.train.latest_checkpoint`` users look for it."""

from stratagem.checkpoint.io import latest_checkpoint

__all__ = ["latest_checkpoint"]
