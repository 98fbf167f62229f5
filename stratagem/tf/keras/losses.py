"""``tf.keras.losses``: Keras 3's losses, and TF's ``Reduction`` names for their ``reduction`` argument.

The loss classes and functions ARE Keras 3's (``tf.keras.losses.SparseCategoricalCrossentropy is
keras.losses.SparseCategoricalCrossentropy``). ``Reduction`` is what TensorFlow 2.21's ``tf.keras.losses`` still
offers for custom training loops (``reduction=tf.keras.losses.Reduction.NONE``): its values are the strings Keras 3
takes, so a loss made with it is the Keras 3 loss a user of ``keras`` would make.
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
