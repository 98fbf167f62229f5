"""Seed 004 ported: model_to_estimator under MirroredStrategy(2) and train_and_evaluate with an evaluator task.

Two replicas with per-replica batches of 4 must train as one replica on batches
of 8 (replica r takes batches r, r+2, ... of the input_fn's pipeline, as TF's
in-process MirroredStrategy does), across two train() calls that resume from
the checkpoint. Then, with TF_CONFIG naming the two replicas chief and worker
and a third process the evaluator, the evaluator evaluates the checkpoints the
trainers write, side by side. One spawn of workers serves both tests.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from examples.estimator_image_folder import LABELS, build_model, input_fn, make_image_folder
from stratagem.estimator import (
    Estimator, EstimatorSpec, EvalSpec, RunConfig, TrainSpec, model_to_estimator, train_and_evaluate,
)
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


def _train_model_fn(model_dir: str, batch_size: int, strategy: object = None) -> dict[str, np.ndarray]:
    """A model_fn Estimator (train_op = the optimizer) trained 3 steps: gradients averaged over replicas."""
    torch.manual_seed(0)
    net = nn.Linear(6, 3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)

    def model_fn(features, labels, mode, params, config):
        return EstimatorSpec(mode, loss=nn.functional.cross_entropy(net(features), labels), train_op=optimizer,
                             scaffold=net)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = x[:, :3].argmax(axis=1).astype(np.int64)
    estimator = Estimator(model_fn, model_dir=model_dir, config=RunConfig(train_distribute=strategy))
    estimator.train(lambda: stratagem.data.Dataset.from_tensor_slices((x, y)).batch(batch_size), steps=3)
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


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


def _specs(root: str, hooks: list) -> tuple[TrainSpec, EvalSpec]:
    train, test = _patterns(root)
    train_spec = TrainSpec(lambda: input_fn(train, LABELS, image_size=SIZE, shuffle=True, batch_size=4, num_epochs=2),
                           max_steps=4, hooks=hooks)
    eval_spec = EvalSpec(lambda: input_fn(test, LABELS, image_size=SIZE, batch_size=4), steps=None,
                         start_delay_secs=0, throttle_secs=0, wait_timeout_secs=90)
    return train_spec, eval_spec


def _evaluator_main(root: str, tf_config: str) -> None:
    """The evaluator task: the same script, but it builds no training strategy (it has no replica)."""
    os.environ["TF_CONFIG"] = tf_config
    try:
        assert RunConfig().task_type == "evaluator"
        config = RunConfig(model_dir=os.path.join(root, "model"), save_checkpoints_steps=2)
        results, _ = train_and_evaluate(model_to_estimator(build_model(), config=config), *_specs(root, []))
        Path(root, "evaluator.json").write_text(json.dumps(results))
    except BaseException:
        Path(root, "evaluator.json").write_text(json.dumps({"error": traceback.format_exc()}))
        raise


def _cluster(root: str) -> dict[str, list[str]]:
    ports = [int(p) for p in Path(root, "ports").read_text().split()]
    return {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
            "evaluator": [f"127.0.0.1:{ports[2]}"]}


def _start_evaluator(root: str) -> mp.process.BaseProcess:
    """Started first, before this worker has a process group or threads; it waits for checkpoints.

    A fork of this warm worker (torch and stratagem imported), not a spawned interpreter: that cost
    ~4 s of CPU to import them again, and the evaluator's role, not its start-up, is what is tested.
    """
    tf_config = json.dumps({"cluster": _cluster(root), "task": {"type": "evaluator", "index": 0}})
    evaluator = mp.get_context("fork").Process(target=_evaluator_main, args=(root, tf_config))
    evaluator.start()
    return evaluator


def _train_and_evaluate(rank: int, root: str, strategy: object, evaluator: mp.process.BaseProcess | None) -> dict | None:
    # The trainers' roles; their replicas are the MirroredStrategy's (the evaluator is outside its group).
    os.environ["TF_CONFIG"] = json.dumps({"cluster": _cluster(root),
                                          "task": {"type": ["chief", "worker"][rank], "index": 0}})
    config = RunConfig(train_distribute=strategy, model_dir=os.path.join(root, "model"), save_checkpoints_steps=2)
    estimator = model_to_estimator(build_model(), config=config)
    hooks = [_WaitForEvaluation(os.path.join(estimator.eval_dir(), "metrics-2.json"))]
    results, _ = train_and_evaluate(estimator, *_specs(root, hooks))
    if evaluator is not None:
        evaluator.join(timeout=60)
        if evaluator.is_alive():
            evaluator.kill()
            raise TimeoutError("the evaluator did not finish within 60 s of the training")
    return results


def _worker(rank: int, world_size: int, root: str) -> dict:
    evaluator = _start_evaluator(root) if rank == 0 else None
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    result = _train_twice(root, os.path.join(root, "mirrored"), batch_size=4, strategy=strategy)
    # Evaluation under eval_distribute, by an input_fn that shards itself with its input_context.
    contexts = []

    def sharded_input_fn(input_context):
        contexts.append((input_context.num_input_pipelines, input_context.input_pipeline_id))
        batches = input_fn(_patterns(root)[1], LABELS, image_size=SIZE, batch_size=4)
        return batches.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

    config = RunConfig(train_distribute=strategy, eval_distribute=strategy, model_dir=os.path.join(root, "mirrored"))
    result["distributed_eval"] = model_to_estimator(build_model(), config=config).evaluate(sharded_input_fn)
    result["contexts"] = sorted(set(contexts))
    result["model_fn"] = _train_model_fn(os.path.join(root, "model_fn"), batch_size=4, strategy=strategy)
    result["train_and_evaluate"] = _train_and_evaluate(rank, root, strategy, evaluator)
    return result


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = make_image_folder(str(tmp_path_factory.mktemp("oct")), images_per_class=8)
    Path(root, "ports").write_text(" ".join(map(str, find_free_ports(3))))
    return Path(root), run_workers(_worker, world_size=2, args=(root,), timeout_s=110)


def test_model_to_estimator_on_two_replicas_resumes_and_matches_one_replica(job: tuple[Path, list[dict]]) -> None:
    root, results = job
    reference = _train_twice(str(root), str(root / "one"), batch_size=8)
    assert results[0]["first"] == ["model.ckpt-3.pt"]
    for rank, result in enumerate(results):
        assert result["results"]["global_step"] == 2 * STEPS  # restored 3, then 3 more
        assert set(result["results"]) == {"loss", "accuracy", "global_step"}
        assert result["results"]["loss"] == pytest.approx(reference["results"]["loss"], rel=1e-5)
        assert result["results"]["accuracy"] == pytest.approx(reference["results"]["accuracy"])
        for name, value in reference["state"].items():
            np.testing.assert_allclose(result["state"][name], value, rtol=0, atol=1e-5, err_msg=name)
        assert result["contexts"] == [(2, rank)]
        for key in ("loss", "accuracy", "global_step"):  # 2 of the 4 test batches per replica, each counted once
            assert result["distributed_eval"][key] == pytest.approx(reference["results"][key], rel=1e-5)
    reference_model_fn = _train_model_fn(str(root / "model_fn_one"), batch_size=8)
    for result in results:  # model_fn's loss is its batch mean: replicas average gradients, as TF's optimizers do
        for name, value in reference_model_fn.items():
            np.testing.assert_allclose(result["model_fn"][name], value, rtol=0, atol=1e-6, err_msg=name)
    untrained = build_model(seed=7).module.state_dict()
    assert max(float(np.abs(reference["state"][k] - untrained[k].numpy()).max()) for k in untrained) > 1e-3


def test_train_and_evaluate_evaluator_task_evaluates_checkpoints_side_by_side(job: tuple[Path, list[dict]]) -> None:
    root, results = job
    assert [r["train_and_evaluate"] for r in results] == [None, None]  # trainers leave evaluation to the evaluator
    evaluator = json.loads((root / "evaluator.json").read_text())
    assert "error" not in evaluator, evaluator.get("error")
    assert evaluator["global_step"] == 4
    written = sorted((root / "model" / "eval").glob("metrics-*.json"))
    assert sorted(json.loads(p.read_text())["global_step"] for p in written) == [2, 4]
    for path in written:
        values = json.loads(path.read_text())
        assert values["loss"] > 0 and 0.0 <= values["accuracy"] <= 1.0
