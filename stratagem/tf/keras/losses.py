"""``tf.keras.losses``: Keras 3's losses, and TF's ``Reduction`` names for their ``reduction`` argument.

The losses ARE Keras 3's. ``Reduction`` (TF 2.21 keeps it for custom loops) holds the strings Keras 3 takes.
"""

from __future__ import annotations

from keras.losses import *  # noqa: F403  (every public Keras 3 loss, as tf.keras.losses has them)

from stratagem.tf._refusal import module_getattr


class Reduction:
    """TF's ``tf.keras.losses.Reduction``: names for the values Keras 3's ``reduction=`` takes."""

    AUTO = "sum_over_batch_size"  # TF's AUTO is SUM_OVER_BATCH_SIZE outside a distribution strategy
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)
__getattr__ = module_getattr("tf.keras.losses")
