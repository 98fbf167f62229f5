"""``tf.keras.datasets``: MNIST and Fashion-MNIST read from Keras's own cache (``~/.keras/datasets``).

``load_data()`` reads (or downloads) the file Keras would; offline, the error names the file to place. CIFAR and the
text datasets are not provided: Keras reads them with ``pickle``, which runs code from the file.
"""

from __future__ import annotations

from stratagem.tf._refusal import module_getattr
from stratagem.tf.keras.datasets import fashion_mnist, mnist

__all__ = ["fashion_mnist", "mnist"]
__getattr__ = module_getattr("tf.keras.datasets")
