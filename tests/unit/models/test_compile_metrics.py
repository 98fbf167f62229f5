"""What ``compile`` logs, as Keras 3: the weighted loss, ``weighted_metrics`` and ``"accuracy"`` by shape.

Expected values are computed here with numpy (float64) from the published
definitions: Keras 3 logs each step's loss weighted by its batch size, so with
sample weights the epoch's loss is ``sum(w * loss) / N``; plain ``metrics``
ignore sample weights and ``weighted_metrics`` use them. Two replicas are
simulated by feeding two ``CompiledMetrics`` uneven halves of a batch and
summing their states, which is what the all-reduce does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.distribute.input_context import InputContext
from stratagem.distribute.strategy import Strategy
from stratagem.models.compile_utils import CompiledLoss, CompiledMetrics
from stratagem.nn import compute_average_loss


def _regression_data(n: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = rng.normal(size=(n, 1)).astype(np.float32)
    weights = rng.uniform(0.0, 3.0, size=n).astype(np.float32)
    return x, y, weights


def _frozen_model(num_outputs: int, **compile_kwargs: object) -> stratagem.Model:
    torch.manual_seed(0)
    model = stratagem.Model(nn.Linear(3, num_outputs))
    model.compile(optimizer=stratagem.optimizers.SGD(learning_rate=0.0), **compile_kwargs)
    return model


def _outputs(model: stratagem.Model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model.module(torch.from_numpy(x)).double().numpy()


# ---- item 1: the logged loss and weighted_metrics ------------------------------------


def test_weighted_loss_logs_sum_of_weighted_losses_over_examples_like_keras():
    x, y, w = _regression_data()
    model = _frozen_model(1, loss="mse")
    history = model.fit(x, y, sample_weight=w, batch_size=5, shuffle=False, verbose=0)  # batches 5, 5, 2
    squared = ((_outputs(model, x) - y) ** 2)[:, 0]
    assert history.history["loss"][0] == pytest.approx((w * squared).sum() / len(x), rel=1e-6)
    assert history.history["loss"][0] != pytest.approx((w * squared).sum() / w.sum(), rel=1e-3)


def test_evaluate_logs_the_same_weighted_loss_as_fit():
    x, y, w = _regression_data()
    model = _frozen_model(1, loss="mse")
    logs = model.evaluate(x, y, sample_weight=w, batch_size=5, verbose=0, return_dict=True)
    squared = ((_outputs(model, x) - y) ** 2)[:, 0]
    assert logs["loss"] == pytest.approx((w * squared).sum() / len(x), rel=1e-6)


def test_plain_metrics_ignore_sample_weights_and_weighted_metrics_use_them():
    x, y, w = _regression_data()
    model = _frozen_model(1, loss="mse", metrics=["mae"], weighted_metrics=["mae"])
    logs = model.evaluate(x, y, sample_weight=w, batch_size=4, verbose=0, return_dict=True)
    errors = np.abs(_outputs(model, x) - y)[:, 0]
    assert set(logs) == {"loss", "mae", "weighted_mae"}  # Keras 3's key for a weighted repeat
    assert logs["mae"] == pytest.approx(errors.mean(), rel=1e-6)
    assert logs["weighted_mae"] == pytest.approx((w * errors).sum() / w.sum(), rel=1e-6)


def test_weighted_metric_alone_keeps_its_name():
    x, y, w = _regression_data()
    model = _frozen_model(1, loss="mse", weighted_metrics=["mse"])
    logs = model.evaluate(x, y, sample_weight=w, batch_size=4, verbose=0, return_dict=True)
    squared = ((_outputs(model, x) - y) ** 2)[:, 0]
    assert set(logs) == {"loss", "mse"}
    assert logs["mse"] == pytest.approx((w * squared).sum() / w.sum(), rel=1e-6)


def test_repeated_metric_names_get_keras_suffixes():
    metrics = CompiledMetrics(["mae", "mae"], ["mae", "mae"])
    metrics.update(torch.zeros(2, 1), torch.ones(2, 1), torch.ones(2), torch.tensor(1.0), 2)
    assert list(metrics.results()) == ["loss", "mae", "mae_1", "weighted_mae", "weighted_mae_1"]


class _SumWithOtherReplica(Strategy):
    """Two replicas: this one and ``other``, whose packed states the all-reduce adds."""

    def __init__(self, other: CompiledMetrics) -> None:
        self._other = other
        super().__init__()

    def _setup(self) -> None:
        self._num_replicas = 2

    def _wrap_module(self, module: nn.Module) -> nn.Module:
        return module

    def _all_reduce(self, tensor: torch.Tensor, op: object) -> torch.Tensor:
        other = torch.cat([v.to(torch.float64).reshape(-1) for m in self._other.all for v in m.variables])
        return tensor + other

    def _input_context(self) -> InputContext:
        return InputContext()


def test_two_replicas_with_uneven_shares_log_the_one_replica_values_exactly():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(7, 1))
    labels = rng.integers(0, 2, size=(7, 1)).astype(np.float64)
    weights = rng.uniform(0.0, 2.0, size=7)
    loss = CompiledLoss(stratagem.losses.BinaryCrossentropy(from_logits=True))

    def compiled() -> CompiledMetrics:
        return CompiledMetrics(["accuracy", "auc"], ["accuracy", stratagem.metrics.Precision(thresholds=[0.2, 0.6])])

    replicas = [compiled(), compiled()]
    for metrics, rows in zip(replicas, [slice(0, 2), slice(2, 7)]):  # a 2 + 5 split of a global batch of 7
        y_true, y_pred, w = torch.tensor(labels[rows]), torch.tensor(logits[rows]), torch.tensor(weights[rows])
        share = compute_average_loss(loss.per_example(y_true, y_pred), w, 7)
        metrics.update(y_true, y_pred, w, share, 7)
    got = replicas[0].results(_SumWithOtherReplica(replicas[1]))

    z, t = logits[:, 0], labels[:, 0]
    cross_entropy = np.logaddexp(0.0, z) - t * z  # -t log(sigmoid z) - (1 - t) log(1 - sigmoid z)
    correct = ((z > 0.5) == (t == 1)).astype(np.float64)
    assert got["loss"] == pytest.approx((weights * cross_entropy).sum() / 7, rel=1e-12)
    assert got["accuracy"] == pytest.approx(correct.mean(), rel=1e-12)
    assert got["weighted_accuracy"] == pytest.approx((weights * correct).sum() / weights.sum(), rel=1e-12)
    for threshold, value in zip([0.2, 0.6], got["precision"]):
        predicted = z > threshold
        expected = (weights * predicted * t).sum() / (weights * predicted).sum()
        assert value == pytest.approx(expected, rel=1e-12)
    whole = compiled()
    whole.update(torch.tensor(labels), torch.tensor(logits), torch.tensor(weights))
    assert got["auc"] == pytest.approx(whole.results()["auc"], rel=1e-12)


# ---- item 4: "accuracy" by the shapes of labels and outputs ---------------------------


@pytest.mark.parametrize(("y_true", "y_pred", "expected_class"), [
    pytest.param(torch.tensor([[1.0], [0.0]]), torch.tensor([[0.7], [0.2]]), "BinaryAccuracy", id="one_output"),
    pytest.param(torch.tensor([1.0, 0.0]), torch.tensor([[0.7], [0.2]]), "BinaryAccuracy", id="one_output_flat_labels"),
    pytest.param(torch.tensor([2, 0]), torch.rand(2, 3), "SparseCategoricalAccuracy", id="class_ids"),
    pytest.param(torch.tensor([[2], [0]]), torch.rand(2, 3), "SparseCategoricalAccuracy", id="class_id_column"),
    pytest.param(torch.eye(3)[:2], torch.rand(2, 3), "CategoricalAccuracy", id="one_hot"),
    pytest.param(torch.tensor([[0, 1], [2, 0]]), torch.rand(2, 2, 3), "SparseCategoricalAccuracy", id="sequence_ids"),
])
def test_accuracy_in_compile_resolves_by_shapes_like_keras_3(y_true, y_pred, expected_class):
    metrics = CompiledMetrics(["accuracy"])
    metrics.update(y_true, y_pred, None)
    accuracy = metrics.metrics[0]
    assert type(accuracy.resolved).__name__ == expected_class  # type: ignore[attr-defined]
    assert accuracy.name == "accuracy"


def test_custom_loss_on_two_class_classifier_logs_argmax_accuracy():
    def my_sparse_loss(y_true, y_pred):
        return nn.functional.cross_entropy(y_pred, y_true.long(), reduction="none")

    x, _, _ = _regression_data()
    labels = (x[:, 0] > 0).astype(np.int64)
    model = _frozen_model(2, loss=my_sparse_loss, metrics=["accuracy"])
    history = model.fit(x, labels, batch_size=4, shuffle=False, verbose=0)
    expected = (_outputs(model, x).argmax(axis=1) == labels).mean()
    assert history.history["accuracy"][0] == pytest.approx(expected, rel=1e-12)


def test_mse_with_one_output_logs_binary_accuracy_like_keras():
    x, _, _ = _regression_data()
    labels = (x[:, 0] > 0).astype(np.float32).reshape(-1, 1)
    model = _frozen_model(1, loss="mse", metrics=["accuracy"])
    logs = model.evaluate(x, labels, batch_size=4, verbose=0, return_dict=True)
    expected = ((_outputs(model, x) > 0.5).astype(np.float64) == labels).mean()
    assert logs["accuracy"] == pytest.approx(expected, rel=1e-12)
    assert 0.0 < logs["accuracy"] < 1.0, "outputs are not 0/1, so exact-match accuracy would log 0"
