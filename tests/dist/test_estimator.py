"""Seed 004 ported: model_to_estimator under MirroredStrategy(2) and train_and_evaluate with an evaluator task.

Two replicas with per-replica batches of 4 must train as one replica on batches
of 8 (replica r takes batches r, r+2, ... of the input_fn's pipeline, as TF's
in-process MirroredStrategy does), across two train() calls that resume from
the checkpoint. With TF_CONFIG naming a chief, a worker and an evaluator, the
evaluator evaluates the checkpoints the trainers write, side by side.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

import stratagem
from examples.estimator_image_folder import LABELS, build_model, input_fn, make_image_folder
from stratagem.estimator import EvalSpec, RunConfig, TrainSpec, model_to_estimator, train_and_evaluate
from stratagem.launcher.ports import find_free_ports
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist

SIZE = (12, 12)
STEPS = 3


def _patterns(root: str) -> tuple[str, str]:
    return os.path.join(root, "train", "**", "*.jpeg"), os.path.join(root, "test", "**", "*.jpeg")


def _train_twice(root: str, model_dir: str, batch_size: int, strategy: object = None) -> dict:
    """The seed's calls: train(steps) twice, the second by a new Estimator over a differently initialised model."""
    train, test = _patterns(root)
    config = RunConfig(train_distribute=strategy, model_dir=model_dir)
    model_to_estimator(build_model(), config=config).train(
        input_fn=lambda: input_fn(train, LABELS, image_size=SIZE, batch_size=batch_size), steps=STEPS)
    first = sorted(p.name for p in Path(model_dir).glob("model.ckpt-*"))
    estimator = model_to_estimator(build_model(seed=7), config=config)
    estimator.train(input_fn=lambda: input_fn(train, LABELS, image_size=SIZE, batch_size=batch_size), steps=STEPS)
    results = estimator.evaluate(input_fn=lambda: input_fn(test, LABELS, image_size=SIZE, batch_size=4))
    module = next(iter(estimator._models.values()))[1].module
    return {"first": first, "results": results, "state": {k: v.numpy().copy() for k, v in module.state_dict().items()}}


def _worker_mirrored(rank: int, world_size: int, root: str) -> dict:
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    return _train_twice(root, os.path.join(root, "mirrored"), batch_size=4, strategy=strategy)


def test_model_to_estimator_on_two_replicas_resumes_and_matches_one_replica(tmp_path: Path) -> None:
    root = make_image_folder(str(tmp_path), images_per_class=8)
    results = run_workers(_worker_mirrored, world_size=2, args=(root,), timeout_s=100)
    reference = _train_twice(root, str(tmp_path / "one"), batch_size=8)
    assert results[0]["first"] == ["model.ckpt-3.pt"]
    for result in results:
        assert result["results"]["global_step"] == 2 * STEPS  # restored 3, then 3 more
        assert set(result["results"]) == {"loss", "accuracy", "global_step"}
        assert result["results"]["loss"] == pytest.approx(reference["results"]["loss"], rel=1e-5)
        assert result["results"]["accuracy"] == pytest.approx(reference["results"]["accuracy"])
        for name, value in reference["state"].items():
            np.testing.assert_allclose(result["state"][name], value, rtol=0, atol=1e-5, err_msg=name)
    untrained = build_model(seed=7).module.state_dict()
    assert max(float(np.abs(reference["state"][k] - untrained[k].numpy()).max()) for k in untrained) > 1e-3


class _WaitForEvaluation(stratagem.callbacks.Callback):
    """Holds the trainers after checkpoint 2 until the evaluator has evaluated it (so it sees two)."""

    stops_training = "never"

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        deadline = time.monotonic() + 60
        while batch == 2 and not os.path.exists(self._path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the evaluator wrote no {self._path} within 60 s")
            time.sleep(0.1)


def _worker_train_and_evaluate(rank: int, world_size: int, root: str, ports: list[int]) -> dict | None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
               "evaluator": [f"127.0.0.1:{ports[2]}"]}
    task = [{"type": "chief", "index": 0}, {"type": "worker", "index": 0}, {"type": "evaluator", "index": 0}][rank]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
    # As a TF script would: the evaluator has no replica, so it builds no training strategy.
    evaluator = RunConfig().task_type == "evaluator"
    strategy = None if evaluator else stratagem.distribute.MultiWorkerMirroredStrategy()
    config = RunConfig(train_distribute=strategy, model_dir=os.path.join(root, "model"), save_checkpoints_steps=2)
    estimator = model_to_estimator(build_model(), config=config)
    train, test = _patterns(root)
    hooks = [] if evaluator else [_WaitForEvaluation(os.path.join(estimator.eval_dir(), "metrics-2.json"))]
    train_spec = TrainSpec(lambda: input_fn(train, LABELS, image_size=SIZE, shuffle=True, batch_size=4, num_epochs=2),
                           max_steps=4, hooks=hooks)
    eval_spec = EvalSpec(lambda: input_fn(test, LABELS, image_size=SIZE, batch_size=4), steps=None,
                         start_delay_secs=0, throttle_secs=0, wait_timeout_secs=60)
    results, _ = train_and_evaluate(estimator, train_spec, eval_spec)
    return results


def test_train_and_evaluate_evaluator_task_evaluates_checkpoints_side_by_side(tmp_path: Path) -> None:
    root = make_image_folder(str(tmp_path), images_per_class=8)
    results = run_workers(_worker_train_and_evaluate, world_size=3, args=(root, find_free_ports(3)), timeout_s=100)
    assert results[0] is None and results[1] is None  # the trainers leave evaluation to the evaluator
    assert results[2]["global_step"] == 4
    written = sorted((tmp_path / "model" / "eval").glob("metrics-*.json"))
    steps = sorted(json.loads(p.read_text())["global_step"] for p in written)
    assert steps == [2, 4]
    for path in written:
        values = json.loads(path.read_text())
        assert values["loss"] > 0 and 0.0 <= values["accuracy"] <= 1.0
