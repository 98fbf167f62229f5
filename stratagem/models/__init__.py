"""The Keras-style model API."""

from stratagem.models.model import Model
from stratagem.models.saving import load_model

__all__ = ["Model", "load_model"]
