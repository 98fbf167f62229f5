"""``tf.estimator``: ``stratagem.estimator`` (Estimator, RunConfig, specs, ``train_and_evaluate``) under TF's names."""

from __future__ import annotations

from typing import Any

from stratagem.estimator import (
    Estimator,
    EstimatorSpec,
    EvalSpec,
    ModeKeys,
    RunConfig,
    TrainSpec,
    train_and_evaluate,
)
from stratagem.tf._refusal import missing_name


def __getattr__(name: str) -> Any:
    raise missing_name("tf.estimator", name)


__all__ = ["Estimator", "EstimatorSpec", "EvalSpec", "ModeKeys", "RunConfig", "TrainSpec", "train_and_evaluate"]
