"""``stratagem.estimator``: TF's Estimator API, on ``Model`` and ``fit``."""

from stratagem.estimator.estimator import Estimator
from stratagem.estimator.keras import model_to_estimator
from stratagem.estimator.run_config import RunConfig
from stratagem.estimator.specs import EstimatorSpec, EvalSpec, ModeKeys, TrainSpec
from stratagem.estimator.training import train_and_evaluate

__all__ = ["Estimator", "EstimatorSpec", "EvalSpec", "ModeKeys", "RunConfig", "TrainSpec", "model_to_estimator",
           "train_and_evaluate"]
