"""Unit tests of ``stratagem.nn.compute_average_loss`` (``tf.nn.compute_average_loss``).

The replica count comes from the current strategy; a fake strategy with four
replicas and no process group stands in for a real one.
"""

from __future__ import annotations

import pytest
import torch

from stratagem.distribute.strategy import Strategy
from stratagem.nn import compute_average_loss


class _FakeStrategy(Strategy):
    """Reports ``num_replicas`` replicas in sync; never communicates."""

    def __init__(self, num_replicas: int) -> None:
        self._requested_replicas = num_replicas
        super().__init__()

    def _setup(self) -> None:
        self._num_replicas = self._requested_replicas

    def _wrap_module(self, module):
        return module

    def _all_reduce(self, tensor, op):
        raise AssertionError("compute_average_loss must not communicate")

    def _input_context(self):
        raise AssertionError("compute_average_loss must not read the input context")


def test_sum_is_divided_by_global_batch_size():
    got = compute_average_loss(torch.tensor([1.0, 2.0, 3.0, 4.0]), global_batch_size=8)
    assert float(got) == 10.0 / 8


def test_sample_weight_scales_each_example_before_the_sum():
    losses, weights = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 0.0, 0.5, 2.0])
    got = compute_average_loss(losses, sample_weight=weights, global_batch_size=8)
    assert float(got) == pytest.approx((1.0 + 0.0 + 1.5 + 8.0) / 8)


def test_per_example_loss_with_extra_axes_sums_every_element_like_tensorflow():
    losses = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert float(compute_average_loss(losses, global_batch_size=4)) == 10.0 / 4


def test_default_global_batch_on_default_strategy_is_the_local_batch():
    losses = torch.tensor([1.0, 2.0, 6.0])
    assert float(compute_average_loss(losses)) == pytest.approx(3.0)


def test_default_global_batch_in_strategy_scope_multiplies_by_num_replicas_in_sync():
    losses = torch.tensor([1.0, 2.0, 6.0])
    with _FakeStrategy(num_replicas=4).scope():
        got = compute_average_loss(losses)
    assert float(got) == pytest.approx(9.0 / (3 * 4))


def test_explicit_global_batch_overrides_the_strategy():
    with _FakeStrategy(num_replicas=4).scope():
        got = compute_average_loss(torch.tensor([1.0, 2.0, 6.0]), global_batch_size=5)
    assert float(got) == pytest.approx(9.0 / 5)


def test_strategy_scope_exit_restores_the_default_replica_count():
    with _FakeStrategy(num_replicas=4).scope():
        pass
    assert float(compute_average_loss(torch.tensor([2.0, 4.0]))) == pytest.approx(3.0)


def test_replica_gradients_summed_equal_the_global_mean_gradient():
    # The reason for the rule: each replica divides by the GLOBAL batch and the
    # strategy sums gradients, which gives the one-device gradient of the mean.
    weight = torch.tensor(1.5, requires_grad=True)
    x = torch.tensor([1.0, -2.0, 3.0, 0.5, 2.0])
    (weight * x).pow(2).mean().backward()
    expected = weight.grad.clone()
    weight.grad = None
    for rows in (slice(0, 3), slice(3, 5)):  # uneven shares, as in a short last batch
        compute_average_loss((weight * x[rows]).pow(2), global_batch_size=5).backward()
    torch.testing.assert_close(weight.grad, expected)


def test_scalar_per_example_loss_raises_value_error():
    with pytest.raises(ValueError, match=r"not a scalar.*Received: per_example_loss.shape=\(\)"):
        compute_average_loss(torch.tensor(3.0), global_batch_size=4)


@pytest.mark.parametrize("global_batch_size", [0, -4])
def test_non_positive_global_batch_size_raises_value_error(global_batch_size):
    with pytest.raises(ValueError, match=f"must be positive. Received: global_batch_size={global_batch_size}"):
        compute_average_loss(torch.tensor([1.0, 2.0]), global_batch_size=global_batch_size)


def test_column_sample_weight_equals_flat_sample_weight():
    losses, weights = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 0.0, 2.0])
    flat = compute_average_loss(losses, sample_weight=weights, global_batch_size=3)
    column = compute_average_loss(losses, sample_weight=weights.reshape(3, 1), global_batch_size=3)
    torch.testing.assert_close(column, flat)
