"""``stratagem.io``: ``tf.io.read_file`` (re-exported from ``stratagem.data.tensor_ops``)."""

from stratagem.data.tensor_ops import read_file

__all__ = ["read_file"]
