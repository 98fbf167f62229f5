"""``Estimator``: TF's train/evaluate/predict/export API over ``Model`` and its ``fit``.

Every call starts from the newest checkpoint in ``model_dir`` (weights, optimizer state, global step), as TF's does,
and ``train`` ends with one. Training is one ``Model.fit`` epoch of the requested steps under
``RunConfig.train_distribute``; the model comes from a ``model_fn`` (``ModelFnModel``) or a compiled ``Model``
(``keras.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stratagem.callbacks import Callback
from stratagem.checkpoint.io import atomic_write
from stratagem.data.options import INFINITE_CARDINALITY
from stratagem.distribute.capabilities import SchedulesSteps, has
from stratagem.distribute.one_device import OneDeviceStrategy
from stratagem.distribute.strategy import Strategy
from stratagem.errors import ConfigurationError
from stratagem.estimator import _checkpoints
from stratagem.estimator._input import call_input_fn
from stratagem.estimator._model_fn_model import ModelFnModel, call_model_fn
from stratagem.estimator.run_config import RunConfig
from stratagem.estimator.specs import ModeKeys
from stratagem.models import Model

logger = logging.getLogger("stratagem.estimator")


class Estimator:
    """``tf.estimator.Estimator`` on torch: checkpointed training in steps, under a strategy.

    Args:
        model_fn: ``model_fn(features, labels, mode, params, config) -> EstimatorSpec``, called once per batch (see
            ``EstimatorSpec`` for what ``train_op`` and ``scaffold`` are in torch terms).
        model_dir: Checkpoint folder; default ``config.model_dir``, else a new temporary folder (as TF). Every
            process must see the same folder.
        config: A ``RunConfig``.
        params: Passed to ``model_fn`` and to input functions that take ``params``.

    Raises:
        ValueError: If ``model_dir`` and ``config.model_dir`` differ.

    Example:
        >>> estimator = Estimator(model_fn, model_dir="/tmp/run", config=RunConfig(save_checkpoints_steps=100))  # doctest: +SKIP
        >>> estimator.train(input_fn, steps=1000)  # doctest: +SKIP
        >>> estimator.evaluate(eval_input_fn)  # doctest: +SKIP
        {'loss': 0.28, 'accuracy': 0.9, 'global_step': 1000}
    """

    def __init__(self, model_fn: Callable[..., Any] | None, model_dir: str | os.PathLike[str] | None = None,
                 config: RunConfig | None = None, params: dict[str, Any] | None = None,
                 warm_start_from: Any = None) -> None:
        if not callable(model_fn) and type(self) is Estimator:  # model_to_estimator's subclass brings its model
            raise TypeError(f"model_fn must be a function (features, labels, mode, params, config) -> EstimatorSpec. "
                            f"Received: model_fn={model_fn!r}")
        config = config or RunConfig()
        if model_dir is not None and config.model_dir is not None and os.fspath(model_dir) != config.model_dir:
            raise ValueError("model_dir and config.model_dir differ; give one, or the same folder to both. Received: "
                             f"model_dir={os.fspath(model_dir)!r}, config.model_dir={config.model_dir!r}")
        if warm_start_from is not None:
            raise ValueError("warm_start_from is not supported: load the weights into the module before building the "
                             f"Estimator instead. Received: warm_start_from={warm_start_from!r}")
        folder = os.fspath(model_dir) if model_dir is not None else config.model_dir
        if folder is None:
            folder = _temporary_model_dir()
            logger.warning("Using temporary folder as model_dir: %s", folder)
        self._config = config.replace(model_dir=folder) if config.model_dir != folder else config
        self._model_fn, self._params = model_fn, dict(params or {})
        # (id(strategy), mode) -> (strategy, model bound to it, built for that mode)
        self._models: dict[tuple[int, ModeKeys], tuple[Any, Model]] = {}
        self._local: OneDeviceStrategy | None = None
        if config.tf_random_seed is not None:
            _seed_everything(config.tf_random_seed)

    @property
    def model_dir(self) -> str:
        return str(self._config.model_dir)

    @property
    def config(self) -> RunConfig:
        return self._config

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def latest_checkpoint(self) -> str | None:
        """The path of the newest checkpoint in ``model_dir``, or None."""
        found = _checkpoints.latest(self.model_dir)
        return found[1] if found else None

    def get_variable_names(self) -> list[str]:
        """The names of the saved module state in the newest checkpoint."""
        return sorted(_checkpoints.read(self._require_checkpoint(None))["weights"])

    # ---- train ------------------------------------------------------------------
    def train(self, input_fn: Callable[..., Any], hooks: Sequence[Callback] | None = None, steps: int | None = None,
              max_steps: int | None = None, saving_listeners: Sequence[Any] | None = None) -> Estimator:
        """Trains ``steps`` more steps (or up to global step ``max_steps``) from the newest checkpoint.

        Args:
            input_fn: Returns a ``Dataset`` of per-replica ``(features, labels)`` batches; it may take ``mode``,
                ``params``, ``config`` and ``input_context``.
            hooks: ``stratagem.callbacks.Callback`` objects, run as in ``fit``.
            steps: Steps to add to the restored global step; None: until the input ends.
            max_steps: Global step to stop at; training is skipped if already there.

        Raises:
            ValueError: For both ``steps`` and ``max_steps``, a non-positive one, or an endless input with neither.
        """
        _check_steps(steps, max_steps)
        if saving_listeners:
            raise ValueError("saving_listeners are not supported; a Callback in hooks sees every step. "
                             f"Received: {len(saving_listeners)} saving_listeners")
        strategy = self._config.train_distribute or self._local_strategy()
        if has(strategy, SchedulesSteps):
            raise ConfigurationError(
                f"Estimator.train does not run under {type(strategy).__name__}: its steps are scheduled by a "
                "ClusterCoordinator. Use Model.fit with it, or a MirroredStrategy/MultiWorkerMirroredStrategy here. "
                f"Received: train_distribute={type(strategy).__name__}")
        data = self._input(input_fn, ModeKeys.TRAIN, strategy)
        model = self._model(strategy, ModeKeys.TRAIN, lambda: _first_batch(data))
        latest = _checkpoints.latest(self.model_dir)
        global_step = _checkpoints.restore(model, latest[1], optimizer=True) if latest else 0
        to_run = _steps_to_run(global_step, steps, max_steps)
        if to_run == 0:
            logger.info("Skipping training: global step %d already reached max_steps=%s.", global_step, max_steps)
            return self
        if to_run is None and data.cardinality() == INFINITE_CARDINALITY:
            raise ValueError("The training input repeats forever, so train would never end. Pass steps=N or "
                             "max_steps=N. Received: steps=None, max_steps=None")
        saver = _CheckpointSaver(self._config, global_step)
        hooks = [*(hooks or []), *getattr(model, "training_hooks", [])]
        model.fit(data, epochs=1, steps_per_epoch=to_run, verbose=0, callbacks=[*hooks, saver])
        return self

    # ---- evaluate / predict / export ---------------------------------------------
    def evaluate(self, input_fn: Callable[..., Any], steps: int | None = None,
                 hooks: Sequence[Callback] | None = None, checkpoint_path: str | None = None,
                 name: str | None = None) -> dict[str, Any]:
        """Evaluates the newest (or the given) checkpoint: ``{"loss": ..., <metrics>, "global_step": N}``.

        Runs under ``RunConfig.eval_distribute``, else this process evaluates all the input alone. The chief (or the
        evaluator) also writes the results to ``model_dir/eval[_name]/metrics-<step>.json``.

        Raises:
            ValueError: If ``model_dir`` holds no checkpoint (train first), as in TF.
        """
        path = self._require_checkpoint(checkpoint_path)
        strategy = self._config.eval_distribute or self._local_strategy()
        data = self._input(input_fn, ModeKeys.EVAL, strategy)
        model = self._model(strategy, ModeKeys.EVAL, lambda: _first_batch(data))
        global_step = _checkpoints.restore(model, path, optimizer=False)
        hooks = [*(hooks or []), *getattr(model, "evaluation_hooks", [])]
        logs = model.evaluate(data, steps=steps, verbose=0, callbacks=hooks, return_dict=True)
        assert isinstance(logs, dict)  # return_dict=True
        results: dict[str, Any] = dict(logs)
        results["global_step"] = global_step
        if strategy.is_chief and (self._config.is_chief or self._config.task_type == "evaluator"):
            _write_results(self.eval_dir(name), global_step, results)
        logger.info("Saving dict for global step %d: %s", global_step, results)
        return results

    def eval_dir(self, name: str | None = None) -> str:
        """The folder ``evaluate`` writes its results to (``model_dir/eval`` or ``eval_<name>``)."""
        return os.path.join(self.model_dir, f"eval_{name}" if name else "eval")

    def predict(self, input_fn: Callable[..., Any], predict_keys: Sequence[str] | None = None,
                hooks: Sequence[Callback] | None = None, checkpoint_path: str | None = None,
                yield_single_examples: bool = True) -> Iterator[Any]:
        """Yields predictions of the newest checkpoint, one example at a time (or one batch), in this process.

        Dict predictions yield dicts of numpy arrays (only ``predict_keys`` if given).
        """
        path = self._require_checkpoint(checkpoint_path)
        strategy = self._local_strategy()
        data = self._input(input_fn, ModeKeys.PREDICT, strategy)
        model = self._model(strategy, ModeKeys.PREDICT, lambda: _first_batch(data))
        _checkpoints.restore(model, path, optimizer=False)
        model.module.eval()
        for batch in data:
            with torch.no_grad():
                outputs = model.predict_step(batch)
            outputs = _select(outputs, predict_keys)
            if not yield_single_examples:
                yield outputs
                continue
            rows = len(next(iter(outputs.values()))) if isinstance(outputs, dict) else len(outputs)
            for row in range(rows):
                yield {k: v[row] for k, v in outputs.items()} if isinstance(outputs, dict) else outputs[row]

    def export_saved_model(self, export_dir_base: str | os.PathLike[str],
                           serving_input_receiver_fn: Callable[[], Any], assets_extra: Any = None,
                           as_text: bool = False, checkpoint_path: str | None = None) -> bytes:
        """Exports the newest checkpoint (``Model.save``) to ``export_dir_base/<timestamp>``; returns it as bytes.

        ``serving_input_receiver_fn()`` returns an example batch of features, on which ``torch.export`` traces the
        module. Only the chief writes.
        """
        if assets_extra is not None or as_text:
            raise ValueError("assets_extra and as_text belong to TF's SavedModel protobufs; stratagem exports with "
                             f"torch.export. Received: assets_extra={assets_extra!r}, as_text={as_text}")
        path = self._require_checkpoint(checkpoint_path)
        features = serving_input_receiver_fn()
        strategy = self._local_strategy()
        model = self._model(strategy, ModeKeys.PREDICT, lambda: features)
        _checkpoints.restore(model, path, optimizer=False)
        target = os.path.join(os.fspath(export_dir_base), str(int(time.time())))
        if self._config.is_chief:
            model.save(target, input_example=features)
        return target.encode()

    # ---- internals ---------------------------------------------------------------
    def _local_strategy(self) -> OneDeviceStrategy:
        if self._local is None:
            self._local = OneDeviceStrategy()
        return self._local

    def _input(self, input_fn: Callable[..., Any], mode: ModeKeys, strategy: Strategy) -> Any:
        return strategy.distribute_datasets_from_function(
            lambda context: call_input_fn(input_fn, context, mode=mode, params=self._params, config=self._config))

    def _model(self, strategy: Strategy, mode: ModeKeys, first_batch: Callable[[], Any]) -> Model:
        """The model for ``strategy`` and ``mode``, one per pair (an EVAL model's optimizer never steps)."""
        key = (id(strategy), mode)
        entry = self._models.get(key)
        if entry is None or entry[0] is not strategy:
            with strategy.scope():
                model = self._build_model(mode, first_batch)
            entry = self._models[key] = (strategy, model)
        return entry[1]

    def _build_model(self, mode: ModeKeys, first_batch: Callable[[], Any]) -> Model:
        """Builds and compiles the model in the current strategy scope; model_to_estimator overrides it."""
        assert self._model_fn is not None
        batch = first_batch()
        features, labels = (batch[0], batch[1] if len(batch) > 1 else None) if isinstance(batch, tuple) else (batch, None)
        # NOTE: torch has no graph to build first: one call on a real batch names the module (spec.scaffold) and the
        # optimizer (spec.train_op) the Estimator manages.
        with torch.no_grad():
            spec = call_model_fn(self._model_fn, features, labels if mode != ModeKeys.PREDICT else None, mode,
                                 self._params, self._config)
        model = ModelFnModel(spec, self._model_fn, self._params, self._config)
        model.compile_for(spec)
        return model

    def _require_checkpoint(self, checkpoint_path: str | None) -> str:
        if checkpoint_path is not None:
            return checkpoint_path
        found = _checkpoints.latest(self.model_dir)
        if found is None:
            raise ValueError(f"Could not find a trained model in model_dir: {self.model_dir!r}. Call train() first, "
                             "or point model_dir at a folder with checkpoints.")
        return found[1]


class _CheckpointSaver(Callback):
    """Counts the global step, logs it, and saves checkpoints on the chief; all replicas meet after the last one."""

    stops_training = "never"

    def __init__(self, config: RunConfig, global_step: int) -> None:
        super().__init__()
        self._config, self.global_step = config, global_step
        self._saved_step, self._saved_at = global_step, time.monotonic()
        self._logged_step, self._logged_at = global_step, time.monotonic()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.global_step += 1
        every = self._config.log_step_count_steps
        if every and self.global_step - self._logged_step >= every and self._writing():
            now = time.monotonic()
            rate = (self.global_step - self._logged_step) / max(now - self._logged_at, 1e-9)
            logger.info("loss = %s, step = %d (global_step/sec: %.3f)", (logs or {}).get("loss"), self.global_step, rate)
            self._logged_step, self._logged_at = self.global_step, now
        steps, secs = self._config.save_checkpoints_steps, self._config.save_checkpoints_secs
        if (steps and self.global_step - self._saved_step >= steps) or (
                secs and time.monotonic() - self._saved_at >= secs):
            self._save()

    def on_train_end(self, logs: Any = None) -> None:
        if self._saved_step != self.global_step:
            self._save()
        strategy = self.model.distribute_strategy
        # NOTE: a barrier: no replica starts its next train/evaluate (which reads the newest checkpoint) before the
        # chief has written this one.
        strategy.reduce("sum", torch.zeros(1, device=strategy.device), axis=None)

    def _save(self) -> None:
        if self._writing():  # only the chief writes: every replica holds the same weights
            path = _checkpoints.save(self.model, str(self._config.model_dir), self.global_step,
                                     self._config.keep_checkpoint_max)
            logger.info("Saving checkpoints for %d into %s.", self.global_step, path)
        self._saved_step, self._saved_at = self.global_step, time.monotonic()


def _check_steps(steps: int | None, max_steps: int | None) -> None:
    if steps is not None and max_steps is not None:
        raise ValueError(f"Can not provide both steps and max_steps (TF refuses it too). Received: steps={steps}, "
                         f"max_steps={max_steps}")
    for name, value in (("steps", steps), ("max_steps", max_steps)):
        if value is not None and value <= 0:
            raise ValueError(f"Must specify {name} > 0. Received: {name}={value}")


def _steps_to_run(global_step: int, steps: int | None, max_steps: int | None) -> int | None:
    if steps is not None:
        return steps
    if max_steps is not None:
        return max(0, max_steps - global_step)
    return None


def _first_batch(data: Any) -> Any:
    iterator = data.iterator(epoch=0)  # fit asks for its epochs by number, so this look costs it nothing
    try:
        return next(iterator)
    finally:
        iterator.close()


def _select(outputs: Any, keys: Sequence[str] | None) -> Any:
    if isinstance(outputs, dict):
        chosen = {k: v for k, v in outputs.items() if keys is None or k in keys}
        return {k: v.detach().cpu().numpy() for k, v in chosen.items()}
    if keys is not None:
        raise ValueError(f"predict_keys needs dict predictions. Received: predictions of type {type(outputs).__name__}")
    return outputs.detach().cpu().numpy()


def _write_results(folder: str, global_step: int, results: dict[str, Any]) -> None:
    text = json.dumps(results, sort_keys=True)
    atomic_write(os.path.join(folder, f"metrics-{global_step}.json"), lambda tmp: Path(tmp).write_text(text))



def _temporary_model_dir() -> str:
    """A fresh folder for ``model_dir``, the same for every process of one launched job on this host.

    TF makes one per process, but here the replicas are processes and read the chief's checkpoints, so they must
    agree: the name hashes what only this job's processes share (the job secret and the launcher's pid), so a later
    job gets a new folder. A process outside a launched job gets a new folder, as in TF.
    """
    secret = os.environ.get("STRATAGEM_JOB_SECRET")
    if not secret:
        return tempfile.mkdtemp()
    job = hashlib.sha256(f"stratagem model_dir\0{secret}\0{os.getppid()}".encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), f"stratagem_model_dir_{job}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder

def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
