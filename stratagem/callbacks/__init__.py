"""Keras-style callbacks."""

from stratagem.callbacks.callback import Callback
from stratagem.callbacks.callback_list import CallbackList
from stratagem.callbacks.history import History
from stratagem.callbacks.progbar import ProgbarLogger

__all__ = ["Callback", "CallbackList", "History", "ProgbarLogger"]
