"""What a ``model_fn`` returns and what ``train_and_evaluate`` takes, as frozen records with TF's field names.

The torch meaning of each field is in ``EstimatorSpec``'s docstring; the loops are in ``estimator.py`` and
``training.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class ModeKeys(str, enum.Enum):
    """The three modes a ``model_fn`` is called in (``tf.estimator.ModeKeys``); equal to TF's strings."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


@dataclass(frozen=True)
class EstimatorSpec:
    """What ``model_fn(features, labels, mode, params, config)`` returns for one batch.

    ``model_fn`` runs eagerly once per batch, so its modules, optimizer and metrics are made once, outside it (in
    ``params`` or a closure), and the spec names them.

    Args:
        mode: The ``ModeKeys`` the function was called with.
        predictions: The outputs: a tensor or a dict of tensors (PREDICT).
        loss: This replica's loss on the batch: a scalar, the mean over the batch (TRAIN, EVAL).
        train_op: The optimizer over the module's parameters (torch or ``stratagem.optimizers``). The Estimator
            zeroes gradients, back-propagates ``loss`` weighted by this replica's rows over the global batch (the
            gradients are summed across replicas, ``fit``'s rule), calls ``step()`` and counts the global step.
        eval_metric_ops: ``{name: stratagem.metrics.Metric}`` updated by ``model_fn`` on this batch (EVAL). The same
            object every call accumulates; a new object every call is summed into the first.
        export_outputs: Unused; kept for TF code.
        scaffold: The ``torch.nn.Module`` holding the model's state, which the Estimator checkpoints, restores,
            exports and broadcasts from the chief (TF's ``Scaffold`` says what its ``Saver`` saves). Required.
        training_hooks: Extra callbacks (``stratagem.callbacks.Callback``) for ``train``, read from the call that
            builds the model.
        evaluation_hooks: Extra callbacks for ``evaluate``, read likewise.
    """

    mode: ModeKeys | str
    predictions: Any = None
    loss: Any = None
    train_op: Any = None
    eval_metric_ops: Mapping[str, Any] | None = None
    export_outputs: Any = None
    scaffold: Any = None
    training_hooks: Sequence[Any] = ()
    evaluation_hooks: Sequence[Any] = ()


@dataclass(frozen=True)
class TrainSpec:
    """``tf.estimator.TrainSpec``: train until the global step reaches ``max_steps`` (forever if None)."""

    input_fn: Callable[..., Any]
    max_steps: int | None = None
    hooks: Sequence[Any] = ()


@dataclass(frozen=True)
class EvalSpec:
    """``tf.estimator.EvalSpec``: how ``train_and_evaluate`` evaluates each new checkpoint.

    Args:
        input_fn: The evaluation input function.
        steps: Batches per evaluation (None: until the input ends).
        name: Evaluation name: results go to ``model_dir/eval_<name>`` (``eval`` without one).
        hooks: Callbacks for each evaluation.
        start_delay_secs: The evaluator's wait before its first look at ``model_dir``.
        throttle_secs: Least seconds between two evaluations.
        wait_timeout_secs: (stratagem) How long the evaluator waits for a new checkpoint before it raises
            ``TimeoutError``; TF waits forever.
    """

    input_fn: Callable[..., Any]
    steps: int | None = 100
    name: str | None = None
    hooks: Sequence[Any] = ()
    exporters: Sequence[Any] = ()
    start_delay_secs: float = 120
    throttle_secs: float = 600
    wait_timeout_secs: float = 3600


__all__ = ["EstimatorSpec", "EvalSpec", "ModeKeys", "TrainSpec"]
