"""``stratagem.estimator``: TF's Estimator API (train in steps from checkpoints, evaluate, predict, export).

Built on ``Model`` and ``fit``: see ``estimator.py`` for the semantics and
``specs.py`` for what a ``model_fn`` returns in torch terms.
"""

from stratagem.estimator.estimator import Estimator
from stratagem.estimator.keras import model_to_estimator
from stratagem.estimator.run_config import RunConfig
from stratagem.estimator.specs import EstimatorSpec, EvalSpec, ModeKeys, TrainSpec
from stratagem.estimator.training import train_and_evaluate

__all__ = ["Estimator", "EstimatorSpec", "EvalSpec", "ModeKeys", "RunConfig", "TrainSpec", "model_to_estimator",
           "train_and_evaluate"]
