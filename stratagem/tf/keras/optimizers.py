"""``tf.keras.optimizers``: Keras 3's optimizers and ``schedules``.

Given to ``compile``, one becomes stratagem's optimizer of its name and hyperparameters, which strategies step, and
``model.optimizer`` is that one (``learning_rate``/``lr`` readable and settable); in a custom loop it is Keras's own.
"""

from __future__ import annotations

from keras.optimizers import *  # noqa: F403  (Keras 3's optimizers, as they are)
from keras.optimizers import schedules  # noqa: F401

from stratagem.tf._refusal import module_getattr

__getattr__ = module_getattr("tf.keras.optimizers")
