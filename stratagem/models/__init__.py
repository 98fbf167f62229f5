"""The Keras-style model API."""

from stratagem.models.model import Model

__all__ = ["Model"]
