"""stratagem: tf.distribute-style distributed training on PyTorch.

Strategies (``stratagem.distribute``), a Keras-style ``Model`` with
``compile``/``fit``/``evaluate``/``predict``, and the ``stratagem run`` launcher.
"""

import os as _os
import sys as _sys

from stratagem import _launched

if "keras" not in _sys.modules:
    # NOTE: Keras 3 reads its backend once, at its first import. On the torch backend a Keras model is a
    # torch.nn.Module that stratagem.Model trains; a backend chosen by the user is left alone (and a Keras
    # model of another backend is refused with the fix, stratagem/models/keras_model.py).
    _os.environ.setdefault("KERAS_BACKEND", "torch")
elif getattr(_sys.modules["keras"], "backend", None) is not None and _sys.modules["keras"].backend.backend() != "torch":
    import warnings as _warnings

    _warnings.warn(
        f"Keras was imported before stratagem, with the {_sys.modules['keras'].backend.backend()!r} backend: "
        "stratagem trains Keras models only on Keras's torch backend, and Keras cannot change backend once "
        "imported. Set KERAS_BACKEND=torch in the environment, or `import stratagem` before `import keras`.",
        stacklevel=2)

if _os.environ.get(_launched.ERROR_FILE_ENV):
    # A worker started by `stratagem run` (or torch's elastic agent): record an uncaught exception for it.
    _launched.install_excepthook()

from stratagem import callbacks, checkpoint, data, datasets, distribute, errors, losses, metrics, nn, optimizers, train
from stratagem import mixed_precision
from stratagem.models import Model
from stratagem import estimator, image, io, lookup, strings
from stratagem.data.tensor_ops import one_hot
from stratagem.distribute import ShardedDataParallelStrategy

from stratagem._version import __version__

__all__ = [
    "Model", "ShardedDataParallelStrategy", "callbacks", "checkpoint", "data", "datasets", "distribute", "errors", "losses", "metrics", "mixed_precision", "nn",
    "optimizers", "train", "__version__", "estimator", "image", "io", "lookup", "one_hot", "strings",
]
