"""``stratagem.image``: ``tf.image``'s decode, dtype and resize ops (re-exported from ``stratagem.data.image_ops``)."""

from stratagem.data.image_ops import convert_image_dtype, decode_image, decode_jpeg, decode_png, resize

__all__ = ["convert_image_dtype", "decode_image", "decode_jpeg", "decode_png", "resize"]
