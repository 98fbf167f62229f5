"""``tf.train``: object checkpoints (``stratagem.train``), the cluster spec, and TF 1's optimizer names.

TF 1's optimizers (``AdamOptimizer``, ``GradientDescentOptimizer``, ``MomentumOptimizer``) return the Keras 3 optimizer
with the same update rule, as TF 2 moved them; graph-mode ``minimize(global_step=)`` is not provided.
"""

from __future__ import annotations

from typing import Any

from stratagem import train as _train
from stratagem.distribute import ClusterSpec
from stratagem.tf._refusal import module_getattr
from stratagem.train import *  # noqa: F403  (stratagem.train's names are tf.train's: Checkpoint, Example, ...)


def _keras_optimizers() -> Any:
    import keras  # tf.keras is Keras 3; stratagem.tf sets its torch backend on import

    return keras.optimizers


def _refuse_locking(use_locking: bool, name: str) -> None:
    if use_locking:
        raise ValueError(f"tf.train.{name}(use_locking=True) is not provided: updates run in one process per "
                         "replica and never race, so there is nothing to lock. Received: use_locking=True")


def GradientDescentOptimizer(learning_rate: float, use_locking: bool = False,
                             name: str = "GradientDescent") -> Any:
    """TF 1's ``tf.train.GradientDescentOptimizer``: ``keras.optimizers.SGD(learning_rate)``."""
    _refuse_locking(use_locking, "GradientDescentOptimizer")
    return _keras_optimizers().SGD(learning_rate=learning_rate, name=name)


def MomentumOptimizer(learning_rate: float, momentum: float, use_locking: bool = False, name: str = "Momentum",
                      use_nesterov: bool = False) -> Any:
    """TF 1's ``tf.train.MomentumOptimizer``: ``keras.optimizers.SGD(learning_rate, momentum, nesterov)``.

    TF 1 scales by the rate when applying, Keras first: with a constant rate the updates are the same.
    """
    _refuse_locking(use_locking, "MomentumOptimizer")
    return _keras_optimizers().SGD(learning_rate=learning_rate, momentum=momentum, nesterov=use_nesterov, name=name)


def AdamOptimizer(learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-08,
                  use_locking: bool = False, name: str = "Adam") -> Any:
    """TF 1's ``tf.train.AdamOptimizer``: ``keras.optimizers.Adam`` (both add epsilon after the bias correction)."""
    _refuse_locking(use_locking, "AdamOptimizer")
    return _keras_optimizers().Adam(learning_rate=learning_rate, beta_1=beta1, beta_2=beta2, epsilon=epsilon,
                                    name=name)


__getattr__ = module_getattr("tf.train")
__all__ = [*_train.__all__, "AdamOptimizer", "ClusterSpec", "GradientDescentOptimizer", "MomentumOptimizer"]
