"""``train_and_evaluate``: TF's recipe of training with evaluations of each new checkpoint.

``TF_CONFIG`` assigns the part, as in TF: ``chief`` and ``worker`` tasks train (under ``train_distribute``); the
``evaluator``, outside the training group, evaluates every new checkpoint in ``model_dir`` until one reaches
``TrainSpec.max_steps``. Without ``TF_CONFIG`` the process trains in chunks of ``save_checkpoints_steps`` and
evaluates after each.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from stratagem.errors import CheckpointError
from stratagem.estimator import _checkpoints
from stratagem.estimator.estimator import Estimator
from stratagem.estimator.specs import EvalSpec, TrainSpec

logger = logging.getLogger("stratagem.estimator")

_POLL_SECS = 0.2


def train_and_evaluate(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec) -> tuple[Any, list[Any]]:
    """Trains and evaluates as ``tf.estimator.train_and_evaluate``; returns ``(last eval results, [])``.

    On a chief or worker of a ``TF_CONFIG`` cluster with an evaluator it only trains and returns ``(None, [])``; on
    the evaluator it returns the last evaluation's results.

    Raises:
        TimeoutError: On the evaluator, if no new checkpoint appears within ``eval_spec.wait_timeout_secs``.
        ValueError: If the task is a ``ps`` task (no parameter servers here).
    """
    if not isinstance(train_spec, TrainSpec) or not isinstance(eval_spec, EvalSpec):
        raise TypeError(f"train_and_evaluate takes a TrainSpec and an EvalSpec. Received: {type(train_spec).__name__}, "
                        f"{type(eval_spec).__name__}")
    task_type = estimator.config.task_type
    if task_type == "evaluator":
        return _run_evaluator(estimator, train_spec, eval_spec), []
    if task_type == "ps":
        raise ValueError("train_and_evaluate has no parameter-server role here; run chief, worker and evaluator "
                         "tasks. Received: task_type='ps'")
    if _has_evaluator_task():
        estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks), max_steps=train_spec.max_steps)
        return None, []
    return _run_local(estimator, train_spec, eval_spec), []


def _run_local(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec) -> dict[str, Any]:
    """Trains to ``max_steps`` in chunks of ``save_checkpoints_steps``, evaluating after each (throttled)."""
    chunk = estimator.config.save_checkpoints_steps
    results: dict[str, Any] = {}
    last_eval = -float("inf")
    while True:
        found = _checkpoints.latest(estimator.model_dir)
        step = found[0] if found else 0
        target = train_spec.max_steps if chunk is None else step + chunk
        if train_spec.max_steps is not None:
            target = min(target, train_spec.max_steps)  # type: ignore[type-var]
        if target is not None and step >= target:
            break
        estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks), max_steps=target)
        done = target is None or target == train_spec.max_steps
        if done or time.monotonic() - last_eval >= eval_spec.throttle_secs:
            results = _evaluate(estimator, eval_spec, None)
            last_eval = time.monotonic()
        if done:
            break
    return results


def _run_evaluator(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec) -> dict[str, Any] | None:
    """Evaluates each new checkpoint until one reaches ``max_steps``; every wait is bounded."""
    time.sleep(eval_spec.start_delay_secs)
    results: dict[str, Any] | None = None
    evaluated_step: int | None = None
    waiting_since = time.monotonic()
    while True:
        found = _checkpoints.latest(estimator.model_dir)
        if found is not None and found[0] != evaluated_step:
            started = time.monotonic()
            try:
                results = _evaluate(estimator, eval_spec, found[1])
            except CheckpointError:  # removed by keep_checkpoint_max while we read it: take the next one
                continue
            evaluated_step, waiting_since = found[0], time.monotonic()
            if train_spec.max_steps is not None and found[0] >= train_spec.max_steps:
                return results
            time.sleep(max(0.0, eval_spec.throttle_secs - (time.monotonic() - started)))
            continue
        if time.monotonic() - waiting_since > eval_spec.wait_timeout_secs:
            raise TimeoutError(
                f"The evaluator saw no new checkpoint in {estimator.model_dir!r} for {eval_spec.wait_timeout_secs:g} s "
                f"(last evaluated global step: {evaluated_step}). Check that the chief is training into the same "
                "model_dir, or raise EvalSpec(wait_timeout_secs=...).")
        time.sleep(_POLL_SECS)


def _evaluate(estimator: Estimator, eval_spec: EvalSpec, checkpoint_path: str | None) -> dict[str, Any]:
    return estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, hooks=list(eval_spec.hooks),
                              checkpoint_path=checkpoint_path, name=eval_spec.name)


def _has_evaluator_task() -> bool:
    from stratagem.estimator.run_config import tf_config_resolver

    resolver = tf_config_resolver()
    return resolver is not None and bool(resolver.cluster_spec().as_dict().get("evaluator"))
