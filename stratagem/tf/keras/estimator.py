"""``tf.keras.estimator``: ``model_to_estimator``, stratagem's (``stratagem.estimator``)."""

from __future__ import annotations

from typing import Any

from stratagem.estimator import model_to_estimator
from stratagem.tf._refusal import missing_name

__all__ = ["model_to_estimator"]


def __getattr__(name: str) -> Any:
    raise missing_name("tf.keras.estimator", name)
