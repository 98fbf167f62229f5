"""``tf.keras.estimator``: ``model_to_estimator``, stratagem's (``stratagem.estimator``)."""

from __future__ import annotations

from stratagem.estimator import model_to_estimator
from stratagem.tf._refusal import module_getattr

__all__ = ["model_to_estimator"]
__getattr__ = module_getattr("tf.keras.estimator")
