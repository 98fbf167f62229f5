"""``stratagem.lookup``: ``tf.lookup``'s static tables and TF 1's ``index_table_from_tensor`` (re-exported from ``stratagem.data.tensor_ops``)."""

from stratagem.data.tensor_ops import KeyValueTensorInitializer, StaticHashTable, index_table_from_tensor

__all__ = ["KeyValueTensorInitializer", "StaticHashTable", "index_table_from_tensor"]
