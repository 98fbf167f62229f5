"""Seed 001's tf.keras script under ParameterServerStrategy (one worker): argv OUT_NPZ; the chief writes the weights.

Each task builds the model from its own seed (chief 0): the chief's values must be the job's.
"""

from __future__ import annotations

import sys

import numpy as np

import stratagem.tf as tf
from tests.dist._keras_models import STEPS, train_tf_seed_cnn


def main() -> None:
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver())
    result = train_tf_seed_cnn(strategy, build_seed=0 if strategy.is_chief else 1, steps_per_epoch=STEPS)
    if strategy.is_chief:
        np.savez(sys.argv[1], *result["weights"])


if __name__ == "__main__":
    main()
