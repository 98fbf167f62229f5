"""``stratagem.strings``: ``tf.strings.split`` (re-exported from ``stratagem.data.tensor_ops``)."""

from stratagem.data.tensor_ops import split

__all__ = ["split"]
