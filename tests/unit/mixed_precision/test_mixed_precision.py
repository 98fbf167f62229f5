"""Mixed precision: Keras policies, float32 master weights, accuracy, and float16 loss scaling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem import mixed_precision
from stratagem.mixed_precision import LossScaleOptimizer


@pytest.fixture(autouse=True)
def _float32_after() -> object:
    yield
    mixed_precision.set_global_policy("float32")


def _digits(num_train: int = 1200) -> tuple[np.ndarray, ...]:
    (x, y), (xt, yt) = stratagem.datasets.digits.load_data()
    return (x[:num_train].reshape(num_train, -1).astype(np.float32) / 255, y[:num_train],
            xt.reshape(len(xt), -1).astype(np.float32) / 255, yt)


def _digits_accuracy(policy: str) -> tuple[float, stratagem.Model]:
    mixed_precision.set_global_policy(policy)
    torch.manual_seed(0)
    model = stratagem.Model(nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10)))
    model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y, xt, yt = _digits()
    model.fit(x, y, batch_size=40, epochs=4, verbose=0)
    return float(model.evaluate(xt, yt, verbose=0, return_dict=True)["accuracy"]), model


def test_policies_have_keras_names_and_dtypes():
    assert mixed_precision.Policy is mixed_precision.DTypePolicy
    assert mixed_precision.global_policy().name == "float32"
    mixed_precision.set_global_policy("mixed_float16")
    policy = mixed_precision.global_policy()
    assert (policy.name, policy.compute_dtype, policy.variable_dtype) == ("mixed_float16", "float16", "float32")
    assert mixed_precision.DTypePolicy("mixed_bfloat16").compute_dtype == "bfloat16"
    with pytest.raises(ValueError, match=r"pure 'float16'.*Received: name='float16'"):
        mixed_precision.set_global_policy("float16")


def test_mixed_bfloat16_reaches_float32_digits_accuracy_with_float32_weights():
    reference, _ = _digits_accuracy("float32")
    mixed, model = _digits_accuracy("mixed_bfloat16")
    assert reference > 0.8  # it learned: the comparison means something
    assert abs(mixed - reference) <= 0.01, (mixed, reference)
    assert all(p.dtype == torch.float32 for p in model.module.parameters())  # master weights
    x = torch.from_numpy(_digits()[0][:4])
    with mixed_precision.autocast("cpu"):
        assert model.module(x).dtype == torch.bfloat16  # the forward really ran in bfloat16
    assert model.predict(x.numpy(), verbose=0).dtype == np.float32


def _float16_model(**scale_args) -> stratagem.Model:
    mixed_precision.set_global_policy("mixed_float16")
    torch.manual_seed(0)
    model = stratagem.Model(nn.Sequential(nn.Linear(3, 2)))
    optimizer = LossScaleOptimizer(stratagem.optimizers.SGD(0.1), **scale_args) if scale_args else "sgd"
    model.compile(optimizer=optimizer, loss="mse")
    return model


def test_mixed_float16_wraps_the_optimizer_with_keras_defaults():
    model = _float16_model()
    assert isinstance(model.optimizer, LossScaleOptimizer)
    assert (model.optimizer.dynamic_scale, model.optimizer.dynamic_growth_steps) == (2.0**15, 2000)


def test_float16_step_with_inf_gradient_is_skipped_halves_scale_and_is_logged():
    model = _float16_model(initial_scale=8.0, dynamic_growth_steps=2)
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    before = [p.detach().clone() for p in model.module.parameters()]
    poisoned = x.copy()
    poisoned[0, 0] = np.inf  # the forced overflow: an inf input gives inf gradients
    logs = model.fit(poisoned, y, batch_size=4, epochs=1, verbose=0, shuffle=False).history
    for old, new in zip(before, model.module.parameters()):
        torch.testing.assert_close(new.detach(), old)  # the step was skipped
    assert model.optimizer.dynamic_scale == 4.0
    assert logs["skipped_steps"] == [1.0]
    logs = model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False).history  # two finite steps
    assert model.optimizer.dynamic_scale == 8.0  # doubled after dynamic_growth_steps finite steps
    assert logs["skipped_steps"] == [1.0]
    assert any(not torch.equal(old, new.detach()) for old, new in zip(before, model.module.parameters()))
    assert model.evaluate(x, y, verbose=0, return_dict=True).keys() == {"loss"}  # evaluate stays Keras'


def test_loss_scaled_update_equals_plain_float32_update_in_a_custom_loop():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    plain = nn.Linear(3, 2)
    plain.load_state_dict(net.state_dict())
    optimizer = LossScaleOptimizer(stratagem.optimizers.SGD(0.5), initial_scale=1024.0)
    optimizer.build(net.parameters(), torch.device("cpu"))
    reference = stratagem.optimizers.SGD(0.5).build(plain.parameters(), torch.device("cpu"))
    x = torch.randn(5, 3)
    optimizer.scale_loss(net(x).square().mean()).backward()
    optimizer.step()
    plain(x).square().mean().backward()
    reference.step()
    for a, b in zip(net.parameters(), plain.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    state = optimizer.state_dict()
    assert state["loss_scale"]["scale"] == 1024.0
    again = LossScaleOptimizer(stratagem.optimizers.SGD(0.5))
    again.build(net.parameters(), torch.device("cpu"))
    again.load_state_dict(state)
    assert again.dynamic_scale == 1024.0


def test_compile_refuses_steps_per_execution_like_keras_torch_backend():
    model = stratagem.Model(nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"must be 1 with the PyTorch backend.*Received: steps_per_execution=4"):
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    with pytest.raises(ValueError, match="Received: jit_compile='xla'"):
        model.compile(optimizer="sgd", loss="mse", jit_compile="xla")
