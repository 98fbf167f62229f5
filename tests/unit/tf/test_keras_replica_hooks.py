"""The Keras hooks for custom loops, on one process with a stand-in strategy of 2 replicas whose other replica
holds the same values (so a sum over replicas doubles): when they sum, and when they leave Keras alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import stratagem  # noqa: F401  (the torch backend, before keras)
import keras
from stratagem.distribute import context
from stratagem.errors import ConfigurationError
from stratagem.models.keras_internals import install_replica_hooks, local_result


class _TwinStrategy:
    """Two replicas holding the same values: every reduce returns twice this replica's value."""

    num_replicas_in_sync = 2
    is_chief = True
    device = torch.device("cpu")

    def __init__(self) -> None:
        self.reduces = 0

    def reduce(self, op: str, value: torch.Tensor, axis: int | None = None) -> torch.Tensor:
        assert op == "sum" and axis is None
        self.reduces += 1
        return value * 2


def _one_step(optimizer: keras.optimizers.Optimizer, weight: keras.Variable, **kwargs: object) -> float:
    optimizer.apply_gradients([(torch.tensor([0.5]), weight)], **kwargs)
    return float(weight.numpy()[0])


def test_apply_gradients_sums_only_inside_run_and_unless_told_to_skip() -> None:
    install_replica_hooks()
    twin = _TwinStrategy()
    weights = [keras.Variable(np.array([1.0], np.float32)) for _ in range(3)]  # made outside any scope
    assert _one_step(keras.optimizers.SGD(0.1), weights[0]) == pytest.approx(1.0 - 0.1 * 0.5)  # Keras as it is
    with context.replica_context(twin):
        assert _one_step(keras.optimizers.SGD(0.1), weights[1]) == pytest.approx(1.0 - 0.1 * 1.0)  # both replicas'
        assert twin.reduces == 1  # all gradients in one all-reduce
        assert _one_step(keras.optimizers.SGD(0.1), weights[2], skip_gradients_aggregation=True) == pytest.approx(0.95)
        assert twin.reduces == 1


def test_trainable_variable_made_in_scope_takes_the_chief_value() -> None:
    install_replica_hooks()
    twin = _TwinStrategy()
    twin.is_chief = False  # this replica sends zeros; the twin's reduce of zeros is zeros
    context.push(twin)  # type: ignore[arg-type]
    try:
        trainable = keras.Variable(np.array([3.0], np.float32))
        frozen = keras.Variable(np.array([3.0], np.float32), trainable=False)
    finally:
        context.pop(twin)  # type: ignore[arg-type]
    assert float(trainable.numpy()[0]) == 0.0 and twin.reduces == 1  # replaced by what the chief sent
    assert float(frozen.numpy()[0]) == 3.0  # non-trainable state is left alone


def test_keras_metric_made_in_scope_reads_over_replicas_outside_run_and_locally_inside() -> None:
    install_replica_hooks()
    twin = _TwinStrategy()
    context.push(twin)  # type: ignore[arg-type]
    try:
        in_scope = keras.metrics.Sum()
    finally:
        context.pop(twin)  # type: ignore[arg-type]
    outside = keras.metrics.Sum()
    for metric in (in_scope, outside):
        metric.update_state(torch.tensor([1.0, 2.0]))
    assert float(outside.result()) == 3.0  # made outside any scope: untouched
    assert float(in_scope.result()) == 6.0  # cross-replica context: the sum over both replicas
    assert float(local_result(in_scope)) == 3.0 and float(in_scope.variables[0].numpy()) == 3.0  # state unchanged
    with context.replica_context(twin):
        assert float(in_scope.result()) == 3.0  # replica context: this replica's value


class _ServerStrategy(_TwinStrategy):
    """Stands in for ParameterServerStrategy: its steps are scheduled and its variables live elsewhere."""

    num_replicas_in_sync = 1

    def pull_all(self) -> None:
        return None


def test_apply_gradients_under_parameter_servers_refuses_instead_of_updating_a_local_copy() -> None:
    install_replica_hooks()
    weight = keras.Variable(np.array([1.0], np.float32))
    with context.replica_context(_ServerStrategy()), pytest.raises(ConfigurationError, match="parameter servers"):
        _one_step(keras.optimizers.SGD(0.1), weight)
    assert float(weight.numpy()[0]) == 1.0
