"""``tf.estimator``: ``stratagem.estimator`` (Estimator, RunConfig, specs, ``train_and_evaluate``) under TF's names."""

from __future__ import annotations

from stratagem.estimator import Estimator, EstimatorSpec, EvalSpec, ModeKeys, RunConfig, TrainSpec, train_and_evaluate
from stratagem.tf._refusal import module_getattr

__getattr__ = module_getattr("tf.estimator")
__all__ = ["Estimator", "EstimatorSpec", "EvalSpec", "ModeKeys", "RunConfig", "TrainSpec", "train_and_evaluate"]
