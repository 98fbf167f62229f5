"""The Keras optimizer surface: ``learning_rate`` / ``lr`` objects, schedules, clipping arguments, state.

Expected numbers are worked out by hand from the Keras 3 formulas.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem import optimizers
from stratagem.distribute.ps import wire
from stratagem.distribute.ps.client import PSClient
from stratagem.distribute.ps.server import ParameterServer, optimizer_spec
from stratagem.optimizers import schedules

CPU = torch.device("cpu")


def _built(optimizer: optimizers.Optimizer) -> list[nn.Parameter]:
    params = [nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))]
    optimizer.build(params, CPU)
    return params


def _step(optimizer: optimizers.Optimizer, params: list[nn.Parameter], gradient: float) -> None:
    for p in params:
        p.grad = torch.full_like(p, gradient)
    optimizer.step()


# ---- learning_rate and lr (seed 001's PrintLR callback) -------------------------------


# What TF's "Distributed training with Keras" tutorial prints for 0.001 held in float32.
PRINTED_RATE = "0.0010000000474974513"


def test_lr_numpy_prints_like_keras():
    optimizer = optimizers.Adam(learning_rate=0.001)
    _built(optimizer)
    assert "Learning rate for epoch 1 is {}".format(optimizer.lr.numpy()) == f"Learning rate for epoch 1 is {PRINTED_RATE}"
    assert optimizer.learning_rate.numpy() == np.float32(0.001)
    assert optimizer.lr.numpy().dtype == np.float32  # Keras 3 keeps the rate in a float32 variable


def test_learning_rate_still_reads_compares_and_sets_as_a_float():
    optimizer = optimizers.SGD(learning_rate=0.1)
    _built(optimizer)
    assert float(optimizer.learning_rate) == 0.1 and optimizer.learning_rate == 0.1 and optimizer.lr < 0.2
    optimizer.lr = optimizer.learning_rate * 0.5
    assert optimizer.learning_rate == 0.05 and optimizer.torch_optimizer.param_groups[0]["lr"] == 0.05


def test_print_lr_callback_of_seed_001_runs_in_fit():
    printed = []

    class PrintLR(stratagem.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            printed.append("Learning rate for epoch {} is {}".format(epoch + 1, self.model.optimizer.lr.numpy()))

    torch.manual_seed(0)
    model = stratagem.Model(nn.Linear(4, 2))
    model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    model.fit(x, (x[:, 0] > 0).astype(np.int64), batch_size=8, epochs=2, verbose=0, callbacks=[PrintLR()])
    assert printed == [f"Learning rate for epoch 1 is {PRINTED_RATE}", f"Learning rate for epoch 2 is {PRINTED_RATE}"]


# ---- schedules ---------------------------------------------------------------------


def test_exponential_decay_follows_the_keras_formula():
    smooth = schedules.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5)
    stairs = schedules.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5, staircase=True)
    assert smooth(0) == 0.1 and smooth(4) == 0.05 and smooth(2) == pytest.approx(0.1 * 0.5 ** 0.5)
    assert [stairs(step) for step in (0, 3, 4, 7, 8)] == [0.1, 0.1, 0.05, 0.05, 0.025]


def test_piecewise_constant_decay_includes_each_boundary_in_the_interval_before():
    schedule = schedules.PiecewiseConstantDecay([3, 5], [1.0, 0.5, 0.1])
    assert [schedule(step) for step in range(8)] == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.1, 0.1]


def test_piecewise_constant_decay_with_mismatched_lengths_raises():
    with pytest.raises(ValueError, match=r"1 less than the length of values.*Received: boundaries=\[3\], values=\[1.0\]"):
        schedules.PiecewiseConstantDecay([3], [1.0])


def test_cosine_decay_without_warmup_ends_at_alpha_times_the_rate():
    schedule = schedules.CosineDecay(0.2, decay_steps=10, alpha=0.1)
    assert schedule(0) == pytest.approx(0.2)
    assert schedule(5) == pytest.approx(0.2 * (0.9 * 0.5 + 0.1))  # cos(pi/2) = 0
    assert schedule(10) == pytest.approx(0.02) and schedule(50) == pytest.approx(0.02)


def test_cosine_decay_warms_up_linearly_then_decays_from_the_target():
    schedule = schedules.CosineDecay(0.0, decay_steps=8, warmup_target=0.4, warmup_steps=4)
    assert [schedule(step) for step in range(5)] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert schedule(6) == pytest.approx(0.4 * 0.5 * (1 + math.cos(math.pi * 2 / 8)))
    assert schedule(12) == pytest.approx(0.0) and schedule(100) == pytest.approx(0.0)


def test_non_positive_decay_steps_raises():
    with pytest.raises(ValueError, match="Received: decay_steps=0"):
        schedules.CosineDecay(0.1, decay_steps=0)


def test_learning_rate_reads_the_schedule_at_the_current_step():
    optimizer = optimizers.SGD(learning_rate=schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5))
    assert optimizer.learning_rate == 0.1  # before build: step 0
    params = _built(optimizer)
    _step(optimizer, params, 1.0)
    _step(optimizer, params, 1.0)
    assert optimizer.learning_rate == 0.025
    assert torch.equal(params[0].detach(), torch.tensor([1.0 - 0.15, -2.0 - 0.15], dtype=torch.float64))


def test_setting_the_rate_of_a_scheduled_optimizer_raises_type_error():
    optimizer = optimizers.Adam(learning_rate=schedules.PiecewiseConstantDecay([10], [0.1, 0.01]))
    with pytest.raises(TypeError, match=r"not settable.*Received: learning_rate=0.5"):
        optimizer.learning_rate = 0.5


# ---- clipping arguments -------------------------------------------------------------


def test_two_clipping_arguments_raise_value_error():
    with pytest.raises(ValueError, match=r"Only one of `clipnorm`, `clipvalue` and `global_clipnorm`.*"
                                         r"Received: clipnorm=1.0, clipvalue=0.5, global_clipnorm=None"):
        optimizers.Adam(clipnorm=1.0, clipvalue=0.5)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "lion"])
def test_every_optimizer_takes_the_keras_common_arguments(name):
    keras_class = type(optimizers.get(name))
    optimizer = keras_class(clipvalue=0.5, weight_decay=0.01, name="mine")
    group = optimizer.build([nn.Parameter(torch.zeros(2))], CPU).param_groups[0]
    assert (group["clipvalue"], group["weight_decay"], optimizer.name) == (0.5, 0.01, "mine")


def test_keras_arguments_not_implemented_raise_value_error_naming_them():
    with pytest.raises(ValueError, match=r"use_ema.*Received: use_ema=True"):
        optimizers.Adam(use_ema=True, gradient_accumulation_steps=4)
    with pytest.raises(ValueError, match=r"integer >= 2.*Received: gradient_accumulation_steps=1"):
        optimizers.Adam(gradient_accumulation_steps=1)
    optimizers.Adam(use_ema=False, ema_momentum=0.9, loss_scale_factor=None)  # Keras' defaults are accepted


def test_out_of_range_arguments_raise_like_keras():
    with pytest.raises(ValueError, match="Received: momentum=1.5"):
        optimizers.SGD(momentum=1.5)
    with pytest.raises(ValueError, match="Received: beta_1=0"):
        optimizers.Lion(beta_1=0)


# ---- state ---------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda: optimizers.SGD(learning_rate=schedules.ExponentialDecay(0.1, 2, 0.5), momentum=0.9),
    lambda: optimizers.Nadam(learning_rate=0.1),
    lambda: optimizers.Adam(learning_rate=0.1, amsgrad=True),
])
def test_state_dict_round_trip_resumes_identical_steps(make):
    first = make()
    params = _built(first)
    for gradient in (0.3, -0.2, 0.5):
        _step(first, params, gradient)
    second = make()
    restored = [nn.Parameter(params[0].detach().clone())]
    second.build(restored, CPU)
    second.load_state_dict(copy.deepcopy(first.state_dict()))
    for gradient in (0.1, -0.4):
        _step(first, params, gradient)
        _step(second, restored, gradient)
    assert torch.equal(restored[0], params[0])
    assert second.learning_rate == first.learning_rate


@pytest.mark.parametrize("make", [
    lambda: optimizers.RMSprop(learning_rate=0.1, momentum=0.5, centered=True),
    lambda: optimizers.Adam(learning_rate=0.1, epsilon=1e-3),
    lambda: optimizers.Nadam(learning_rate=0.1, epsilon=1e-3),
    # the arguments every rule shares travel too: without them the server's step would not clip or decay
    lambda: optimizers.SGD(learning_rate=0.1, momentum=0.5, weight_decay=0.1, clipnorm=0.05),
])
def test_parameter_server_applies_the_keras_rule_it_is_sent_across_a_restore(make):
    local = make()
    params = _built(local)
    first, second = ParameterServer("127.0.0.1:0").start(), ParameterServer("127.0.0.1:0").start()
    try:
        client = PSClient(first.address, timeout_s=10)
        client.call("Create", {"w": params[0].detach().clone()}, {})
        for step, gradient in enumerate((0.3, -0.2, 0.5, 0.01, -0.02)):
            if step == 3:  # the job resumes on a fresh server from a snapshot (bias corrections keep counting)
                snapshot = client.call_bytes("Snapshot", wire.encode({}, {}))
                client = PSClient(second.address, timeout_s=10)
                client.call_bytes("Restore", snapshot)
            client.call("Push", {"w": torch.full((2,), gradient, dtype=torch.float64)},
                        {"optimizer": optimizer_spec(local.torch_optimizer)})
            _step(local, params, gradient)
        torch.testing.assert_close(client.call("Pull", {}, {"names": ["w"]})[0]["w"], params[0].detach(), rtol=0, atol=1e-12)
    finally:
        first.stop()
        second.stop()
