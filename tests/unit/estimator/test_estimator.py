"""Estimator semantics in one process: resuming from model_dir, step counts, evaluate/predict/export,
model_fn in torch terms, train_and_evaluate locally, RunConfig rules."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.data import Dataset
from stratagem.estimator import (
    Estimator, EstimatorSpec, EvalSpec, ModeKeys, RunConfig, TrainSpec, model_to_estimator, train_and_evaluate,
)

BATCH = 4


def _data(num: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num, 6)).astype(np.float32)
    return x, (x[:, :3].argmax(axis=1)).astype(np.int64)


def _input_fn(num: int = 24, seed: int = 0):
    x, y = _data(num, seed)
    return lambda: Dataset.from_tensor_slices(({"input_1": x}, y)).batch(BATCH)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.linear(features["input_1"])


def _compiled_model(seed: int = 0) -> stratagem.Model:
    torch.manual_seed(seed)
    model = stratagem.Model(_Net())
    model.compile(optimizer=stratagem.optimizers.Adam(learning_rate=0.05),
                  loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _weights(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_train_twice_adds_steps_and_resumes_weights_and_adam_state(tmp_path: Path) -> None:
    config = RunConfig(model_dir=str(tmp_path))
    model_to_estimator(_compiled_model(), config=config).train(_input_fn(), steps=3)
    # A new Estimator over a differently initialised model: everything must come from the checkpoint.
    second = model_to_estimator(_compiled_model(seed=5), config=config).train(_input_fn(), steps=3)
    assert os.path.basename(second.latest_checkpoint()) == "model.ckpt-6.pt"
    # Reference: one fit over the same 6 batches (each train() call restarts the input, as TF's does).
    reference = _compiled_model()
    batches = list(_input_fn()())[:3] * 2
    reference.fit(batches, epochs=1, verbose=0, shuffle=False)
    estimator_model = second._models[(id(second._local_strategy()), ModeKeys.TRAIN)][1]
    for name, value in _weights(reference.module).items():
        torch.testing.assert_close(estimator_model.module.state_dict()[name], value, rtol=0, atol=1e-6)
    assert second.evaluate(_input_fn())["global_step"] == 6


def test_max_steps_caps_and_skips_when_reached(tmp_path: Path) -> None:
    estimator = model_to_estimator(_compiled_model(), model_dir=str(tmp_path))
    estimator.train(_input_fn(), max_steps=4)
    estimator.train(_input_fn(), max_steps=2)  # already past: nothing runs
    assert estimator.evaluate(_input_fn())["global_step"] == 4
    estimator.train(_input_fn(), max_steps=5)
    assert estimator.evaluate(_input_fn())["global_step"] == 5
    estimator.train(_input_fn())  # no steps: until the input ends (6 batches)
    assert estimator.evaluate(_input_fn())["global_step"] == 11


def test_evaluate_reports_loss_metrics_and_global_step_as_model_evaluate(tmp_path: Path) -> None:
    estimator = model_to_estimator(_compiled_model(), model_dir=str(tmp_path))
    estimator.train(_input_fn(), steps=2)
    results = estimator.evaluate(_input_fn(num=10, seed=3), name="test")
    assert set(results) == {"loss", "accuracy", "global_step"}
    assert estimator.get_variable_names() == ["linear.bias", "linear.weight"]
    model = estimator._models[(id(estimator._local_strategy()), ModeKeys.EVAL)][1]
    x, y = _data(10, seed=3)
    expected = model.evaluate({"input_1": x}, y, batch_size=BATCH, verbose=0, return_dict=True)
    assert results["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    assert results["accuracy"] == pytest.approx(expected["accuracy"])
    written = json.loads((tmp_path / "eval_test" / "metrics-2.json").read_text())
    assert written["global_step"] == 2 and written["loss"] == pytest.approx(results["loss"])


def test_keep_checkpoint_max_deletes_the_oldest_and_steps_are_logged(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    config = RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=1, keep_checkpoint_max=2,
                       log_step_count_steps=2)
    with caplog.at_level("INFO", logger="stratagem.estimator"):
        model_to_estimator(_compiled_model(), config=config).train(_input_fn(), steps=5)
    assert sorted(p.name for p in tmp_path.glob("model.ckpt-*")) == ["model.ckpt-4.pt", "model.ckpt-5.pt"]
    logged = [r.getMessage() for r in caplog.records if "global_step/sec" in r.getMessage()]
    assert [m.split("step = ")[1].split(" ")[0] for m in logged] == ["2", "4"]


def test_bad_arguments_raise_with_the_fix(tmp_path: Path) -> None:
    estimator = model_to_estimator(_compiled_model(), model_dir=str(tmp_path))
    with pytest.raises(ValueError, match="Could not find a trained model"):
        estimator.evaluate(_input_fn())
    with pytest.raises(ValueError, match="both steps and max_steps.*Received"):
        estimator.train(_input_fn(), steps=1, max_steps=2)
    with pytest.raises(ValueError, match="repeats forever"):
        estimator.train(lambda: _input_fn()().repeat())
    with pytest.raises(TypeError, match="must return a stratagem.data.Dataset"):
        estimator.train(lambda: _data(), steps=1)
    with pytest.raises(ValueError, match="not been compiled"):
        model_to_estimator(stratagem.Model(_Net()))
    with pytest.raises(TypeError, match=r"stratagem.Model\(module\).*Received"):
        model_to_estimator(_Net())
    with pytest.raises(ValueError, match="exclusive"):
        RunConfig(save_checkpoints_steps=1, save_checkpoints_secs=1)


def test_run_config_reads_the_task_from_tf_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (RunConfig().task_type, RunConfig().is_chief) == ("worker", True)
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "evaluator": ["127.0.0.1:3"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "evaluator", "index": 0}}))
    assert (RunConfig().task_type, RunConfig().task_id, RunConfig().is_chief) == ("evaluator", 0, False)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}))
    assert RunConfig().is_chief


def test_tf_random_seed_seeds_torch_when_the_estimator_is_made(tmp_path: Path) -> None:
    draws = []
    for i in range(2):
        model_fn = _model_fn_parts()[1]
        torch.rand(5 + i)  # the RNG stands elsewhere each time: only the seed can make the draws equal
        Estimator(model_fn, model_dir=str(tmp_path), config=RunConfig(tf_random_seed=3))
        draws.append(torch.rand(2))
    torch.testing.assert_close(draws[0], draws[1], rtol=0, atol=0)
    with pytest.raises(TypeError, match="model_fn must be a function.*Received: model_fn=None"):
        Estimator(None, model_dir=str(tmp_path))


# ---- model_fn in torch terms ------------------------------------------------------------------------
def _model_fn_parts():
    torch.manual_seed(0)
    net = nn.Linear(6, 3)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

    def model_fn(features, labels, mode, params, config):
        logits = net(features["input_1"])
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions={"classes": logits.argmax(dim=1), "logits": logits}, scaffold=net)
        loss = nn.functional.cross_entropy(logits, labels)
        accuracy = stratagem.metrics.SparseCategoricalAccuracy()  # a new metric per call: summed by the Estimator
        accuracy.update_state(labels, logits)
        return EstimatorSpec(mode, loss=loss, train_op=optimizer, eval_metric_ops={"accuracy": accuracy},
                             scaffold=net, training_hooks=[counter])

    counter = stratagem.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: counted.append(batch))
    counted: list[int] = []
    return net, model_fn, counted


def test_model_fn_estimator_trains_as_a_plain_torch_loop(tmp_path: Path) -> None:
    net, model_fn, counted = _model_fn_parts()
    estimator = Estimator(model_fn, model_dir=str(tmp_path))
    estimator.train(_input_fn(), steps=4)
    assert counted == [0, 1, 2, 3]  # the spec's training_hooks ran
    torch.manual_seed(0)
    reference = nn.Linear(6, 3)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for features, labels in list(_input_fn()())[:4]:
        optimizer.zero_grad()
        nn.functional.cross_entropy(reference(torch.as_tensor(features["input_1"])), torch.as_tensor(labels)).backward()
        optimizer.step()
    torch.testing.assert_close(net.weight, reference.weight, rtol=0, atol=1e-6)
    results = estimator.evaluate(_input_fn(num=12, seed=2))
    x, y = _data(12, seed=2)
    with torch.no_grad():
        logits = reference(torch.from_numpy(x))
    assert results["global_step"] == 4
    assert results["accuracy"] == pytest.approx(float((logits.argmax(1).numpy() == y).mean()))
    assert results["loss"] == pytest.approx(float(nn.functional.cross_entropy(logits, torch.from_numpy(y))), rel=1e-5)
    predictions = list(estimator.predict(lambda: Dataset.from_tensor_slices({"input_1": x}).batch(5)))
    assert len(predictions) == 12 and set(predictions[0]) == {"classes", "logits"}
    assert [int(p["classes"]) for p in predictions] == logits.argmax(1).tolist()


def test_model_fn_without_scaffold_raises_naming_it(tmp_path: Path) -> None:
    net = nn.Linear(6, 3)

    def model_fn(features, labels, mode, params, config):
        return EstimatorSpec(mode, loss=net(features["input_1"]).sum(), train_op=torch.optim.SGD(net.parameters(), 0.1))

    with pytest.raises(ValueError, match="scaffold=module"):
        Estimator(model_fn, model_dir=str(tmp_path)).train(_input_fn(), steps=1)


def test_export_saved_model_writes_a_loadable_folder(tmp_path: Path) -> None:
    estimator = model_to_estimator(_compiled_model(), model_dir=str(tmp_path / "run"))
    estimator.train(_input_fn(), steps=1)
    x, _ = _data(3)
    path = estimator.export_saved_model(str(tmp_path / "export"), lambda: {"input_1": torch.from_numpy(x)})
    loaded = stratagem.models.load_model(path.decode())
    model = estimator._models[(id(estimator._local_strategy()), ModeKeys.PREDICT)][1]
    with torch.no_grad():
        expected = model.module({"input_1": torch.from_numpy(x)}).numpy()
    np.testing.assert_allclose(loaded.predict({"input_1": x}), expected, rtol=1e-5, atol=1e-6)


def test_local_train_and_evaluate_evaluates_each_checkpoint_chunk(tmp_path: Path) -> None:
    config = RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=2)
    estimator = model_to_estimator(_compiled_model(), config=config)
    results, exports = train_and_evaluate(estimator, TrainSpec(lambda: _input_fn()().repeat(), max_steps=6),
                                          EvalSpec(_input_fn(num=8), steps=None, throttle_secs=0))
    assert results["global_step"] == 6 and exports == []
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["metrics-2.json", "metrics-4.json",
                                                                      "metrics-6.json"]
