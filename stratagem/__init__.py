"""stratagem: tf.distribute-style distributed training on PyTorch.

Strategies (``stratagem.distribute``), a Keras-style ``Model`` and the ``stratagem run`` launcher. Public names are
imported on first use (PEP 562), so the torch-free parts (the launcher, cluster parsing) start without torch.
"""

import os as _os
import sys as _sys
import typing as _typing

from stratagem import _launched, _lazy_imports
from stratagem._version import __version__

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

if _typing.TYPE_CHECKING:
    from stratagem import (
        callbacks, checkpoint, data, datasets, distribute, errors, estimator, image, io, lookup, losses, metrics,
        mixed_precision, nn, optimizers, strings, train,
    )
    from stratagem.data.tensor_ops import one_hot
    from stratagem.distribute import ShardedDataParallelStrategy
    from stratagem.models import Model

# Public names defined in a module: name -> that module. Submodules (``stratagem.distribute``) import on first use.
_ATTRIBUTES = {
    "Model": "stratagem.models",
    "ShardedDataParallelStrategy": "stratagem.distribute",
    "one_hot": "stratagem.data.tensor_ops",
}

__all__ = [
    "Model", "ShardedDataParallelStrategy", "callbacks", "checkpoint", "data", "datasets", "distribute", "errors", "losses", "metrics", "mixed_precision", "nn",
    "optimizers", "train", "__version__", "estimator", "image", "io", "lookup", "one_hot", "strings",
]

__getattr__, __dir__ = _lazy_imports.hooks(__name__, globals(), _ATTRIBUTES)
