"""``tf.keras``: Keras 3 on its torch backend, whose models train through stratagem.

As in TF 2.16+, layers, losses, metrics, ops and utilities ARE Keras 3's (``tf.keras.layers is keras.layers``). The
models' ``compile``/``fit``/``evaluate``/``predict``/``save`` run through ``stratagem.Model``'s fit loop under their
strategy; ``callbacks``, ``models.load_model``, ``datasets``, ``mixed_precision`` and ``estimator`` are stratagem's.
"""

from __future__ import annotations

import importlib
import sys

import stratagem  # noqa: F401  (sets KERAS_BACKEND=torch when Keras is not imported yet)
from stratagem.models.keras_internals import install_channels_last_layout
from stratagem.models.keras_model import check_torch_backend

import keras  # noqa: E402

check_torch_backend(keras, "stratagem.tf.keras")
install_channels_last_layout()  # TF's default layout, channels last, without Keras's layout copies

from keras import (  # noqa: E402
    DTypePolicy, Initializer, Input, InputSpec, KerasTensor, Layer, Loss, Metric, Operation, Optimizer, Regularizer,
    StatelessScope, Variable, device, name_scope, version,
)

from stratagem.tf._refusal import ALTERNATIVES, module_getattr  # noqa: E402
from stratagem.tf.keras._models import Model, Sequential  # noqa: E402

# Keras 3's namespaces, as they are: `import stratagem.tf.keras.layers` and `tf.keras.layers.Dense` both resolve.
_KERAS_NAMESPACES = ("activations", "backend", "config", "constraints", "dtype_policies", "initializers", "layers",
                     "metrics", "ops", "preprocessing", "random", "regularizers", "saving", "tree", "utils")
# NOTE: TF 2.21's tf.keras is `keras._tf_keras.keras` (3.15), whose preprocessing keeps Keras 2's ImageDataGenerator
# and Tokenizer, which TF's tf.data guide uses; keras.preprocessing lacks them.
_TF_KERAS_HOMES = {"preprocessing": "keras._tf_keras.keras.preprocessing"}
for _name in _KERAS_NAMESPACES:
    _module = importlib.import_module(_TF_KERAS_HOMES.get(_name, f"keras.{_name}"))
    sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module

# tf.keras 2's `Metric.reset_states()`, which Keras 3 renamed `reset_state()`: TF 2.x training loops call it.
keras.metrics.Metric.reset_states = keras.metrics.Metric.reset_state  # type: ignore[attr-defined]

_PICKLED = ("Keras reads it with pickle, which runs code from the file, so stratagem does not provide it; load the "
            "data into numpy arrays yourself, or use stratagem.datasets (digits is bundled)")
ALTERNATIVES.update({
    **{f"tf.keras.datasets.{name}": _PICKLED for name in ("cifar10", "cifar100", "imdb", "reuters")},
    "tf.keras.applications": "pretrained models download their weights from the network: not provided; build the "
                             "architecture with tf.keras.layers and load weights you have with model.load_weights",
    "tf.keras.distribution": "Keras 3's distribution API runs on JAX only; use tf.distribute strategies "
                             "(stratagem.distribute), which train tf.keras models through fit",
})

# Namespaces with stratagem's behaviour in them: loaded on first use.
_OWN_NAMESPACES = ("callbacks", "datasets", "estimator", "losses", "mixed_precision", "models", "optimizers")
__getattr__ = module_getattr("tf.keras", {name: f"{__name__}.{name}" for name in _OWN_NAMESPACES}, cache=globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWN_NAMESPACES))


__all__ = ["DTypePolicy", "Initializer", "Input", "InputSpec", "KerasTensor", "Layer", "Loss", "Metric", "Model",
           "Operation", "Optimizer", "Regularizer", "Sequential", "StatelessScope", "Variable", "device", "name_scope",
           "version", *_KERAS_NAMESPACES, *_OWN_NAMESPACES]
