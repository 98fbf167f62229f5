"""``tf.keras.optimizers``: Keras 3's optimizers and ``schedules``.

Given to ``compile``, a Keras optimizer becomes stratagem's optimizer of the same
name and hyperparameters, which strategies step (``stratagem/models/keras_compile.py``);
``model.optimizer`` is then that optimizer (``learning_rate``/``lr`` readable and
settable). Used in a custom loop, it is Keras's own (``apply_gradients``).
"""

from __future__ import annotations

from keras.optimizers import *  # noqa: F403  (Keras 3's optimizers, as they are)
from keras.optimizers import schedules  # noqa: F401

from stratagem.tf._refusal import module_getattr

__getattr__ = module_getattr("tf.keras.optimizers")
