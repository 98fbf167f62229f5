"""stratagem: tf.distribute-style distributed training on PyTorch.

Strategies (``stratagem.distribute``), a Keras-style ``Model`` with
``compile``/``fit``/``evaluate``/``predict``, and the ``stratagem run`` launcher.
"""

from stratagem import callbacks, checkpoint, data, datasets, distribute, errors, losses, metrics, nn, optimizers, train
from stratagem.models import Model

__version__ = "0.1.0"

__all__ = [
    "Model", "callbacks", "checkpoint", "data", "datasets", "distribute", "errors", "losses", "metrics", "nn",
    "optimizers", "train", "__version__",
]
