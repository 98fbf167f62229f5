"""Two replicas: compressed gradients keep the global-batch SUM; accumulation matches one step on k times the batch.

One spawn of two gloo workers runs every check; the parent computes the
one-replica references.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn

import stratagem
from stratagem.distribute import CommunicationOptions, PowerSGD
from stratagem import mixed_precision
from stratagem.distribute.compression import all_reduce_compressed
from stratagem.mixed_precision import LossScaleOptimizer
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist

COMPRESSIONS = (None, "bf16", "fp16", PowerSGD(rank=1, start_iter=1000), PowerSGD(rank=2, start_iter=2))


def _digits() -> tuple[np.ndarray, ...]:
    (x, y), (xt, yt) = stratagem.datasets.digits.load_data()
    flat = lambda images: images.reshape(len(images), -1).astype(np.float32) / 255  # noqa: E731
    return flat(x[:1280]), y[:1280], flat(xt), yt


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))


def _fit_digits(strategy: stratagem.distribute.Strategy, more_epochs: int = 2) -> dict:
    """20 steps (weights kept), then ``more_epochs`` epochs (test accuracy)."""
    x, y, xt, yt = _digits()
    with strategy.scope():
        model = stratagem.Model(_net())
        model.compile(optimizer=stratagem.optimizers.SGD(0.1, momentum=0.9),
                      loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=1, verbose=0, shuffle=False)  # 1280 / 64: 20 steps
    after_20 = [w.copy() for w in model.get_weights()]
    if not more_epochs:
        return {"after_20": after_20}
    model.fit(x, y, batch_size=64, epochs=more_epochs, verbose=0)
    return {"after_20": after_20, "accuracy": float(model.evaluate(xt, yt, verbose=0, return_dict=True)["accuracy"])}


def _small() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _fit_small(strategy: stratagem.distribute.Strategy, *, batch_size: int, accumulate: int | None) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    y = (x[:, :3].argmax(axis=1)).astype(np.int64)
    with strategy.scope():
        model = stratagem.Model(_small())
        model.compile(optimizer=stratagem.optimizers.SGD(0.5, momentum=0.9, gradient_accumulation_steps=accumulate),
                      loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=batch_size, epochs=2, verbose=0, shuffle=False)
    return model.get_weights()


def _count_all_reduces(fn: object) -> tuple[object, int]:
    calls = []
    original = dist.all_reduce

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    dist.all_reduce = counting  # this worker process only: the hooks call dist.all_reduce by name
    try:
        return fn(), len(calls)  # type: ignore[operator]
    finally:
        dist.all_reduce = original


def _central_float16_skip(strategy: stratagem.distribute.Strategy) -> dict:
    """Only replica 1's rows hold an inf: under CentralStorage every replica must still skip that step."""
    mixed_precision.set_global_policy("mixed_float16")
    try:
        with strategy.scope():
            torch.manual_seed(0)
            model = stratagem.Model(nn.Linear(3, 2))
            model.compile(optimizer=LossScaleOptimizer(stratagem.optimizers.SGD(0.1), initial_scale=8.0), loss="mse")
    finally:
        mixed_precision.set_global_policy("float32")
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    x[3, 0] = np.inf  # the global batch's last row: replica 1's share
    before = [w.copy() for w in model.get_weights()]
    logs = model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False).history
    unchanged = all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    model.fit(np.ones((4, 3), np.float32), y, batch_size=4, epochs=1, verbose=0)
    return {"unchanged": unchanged, "skipped": logs["skipped_steps"], "scale": model.optimizer.dynamic_scale,
            "after": model.get_weights()}


def _worker(rank: int, world_size: int) -> dict:
    out: dict = {"digits": {}}
    for compression in COMPRESSIONS:
        strategy = stratagem.distribute.MirroredStrategy(
            num_replicas=world_size, communication_options=CommunicationOptions(compression=compression))
        # PowerSGD before its start_iter sends plain gradients: 20 steps show its sum, no accuracy needed.
        plain_phase = isinstance(compression, PowerSGD) and compression.start_iter > 20
        out["digits"][repr(compression)] = _fit_digits(strategy, more_epochs=0 if plain_phase else 2)
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    out["accumulated"], out["accumulated_reduces"] = _count_all_reduces(
        lambda: _fit_small(strategy, batch_size=8, accumulate=4))
    _, out["plain_reduces"] = _count_all_reduces(lambda: _fit_small(strategy, batch_size=8, accumulate=None))
    central = stratagem.distribute.CentralStorageStrategy(num_replicas=world_size)
    out["central_accumulated"] = _fit_small(central, batch_size=8, accumulate=4)
    out["central_float16"] = _central_float16_skip(central)
    value = torch.tensor([1.0 + rank, 1000.0 * (rank + 1), -3.0e-3])
    out["bf16_sum"] = all_reduce_compressed(value, "bf16").numpy()
    out["fp16_sum"] = all_reduce_compressed(value, "fp16").numpy()
    return out


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_workers(_worker, world_size=2, timeout_s=110)


def _relative(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    return max(float(np.linalg.norm(g - e) / np.linalg.norm(e)) for g, e in zip(got, expected))


def test_accumulating_four_steps_on_two_replicas_matches_one_replica_on_four_times_the_batch(results):
    reference = _fit_small(stratagem.distribute.OneDeviceStrategy("cpu"), batch_size=32, accumulate=None)
    for rank, result in enumerate(results):
        for got, expected in zip(result["accumulated"], reference):
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=f"rank {rank}")


def test_accumulation_under_central_storage_matches_one_replica_on_four_times_the_batch(results):
    reference = _fit_small(stratagem.distribute.OneDeviceStrategy("cpu"), batch_size=32, accumulate=None)
    for result in results:
        for got, expected in zip(result["central_accumulated"], reference):
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_central_storage_replicas_agree_to_skip_a_float16_step_only_one_of_them_overflowed(results):
    for result in results:
        assert result["central_float16"]["unchanged"] and result["central_float16"]["skipped"] == [1.0]
        assert result["central_float16"]["scale"] == 4.0
    for a, b in zip(results[0]["central_float16"]["after"], results[1]["central_float16"]["after"]):
        np.testing.assert_array_equal(a, b)


def test_accumulation_all_reduces_gradients_only_on_the_updating_micro_step(results):
    # 16 micro-steps: 16 gradient all-reduces without accumulation, 4 with k=4 (one bucket); the rest is the same.
    for result in results:
        assert result["plain_reduces"] - result["accumulated_reduces"] == 12


@pytest.mark.parametrize("compression", ["'bf16'", "'fp16'"])
def test_compressed_gradients_stay_within_one_percent_and_reach_the_same_accuracy(results, compression):
    for result in results:
        plain, compressed = result["digits"]["None"], result["digits"][compression]
        assert _relative(compressed["after_20"], plain["after_20"]) <= 1e-2
        assert plain["accuracy"] > 0.8
        assert abs(compressed["accuracy"] - plain["accuracy"]) <= 0.01, (compressed["accuracy"], plain["accuracy"])


def test_compressed_runs_sum_like_one_replica_on_the_global_batch(results):
    # Averaging instead of summing would halve every update: far outside 1e-2.
    reference = _fit_digits(stratagem.distribute.OneDeviceStrategy("cpu"), more_epochs=0)
    for name in ("None", "'bf16'", "'fp16'"):
        assert _relative(results[0]["digits"][name]["after_20"], reference["after_20"]) <= 1e-2, name
    # PowerSGD before its start_iter sends plain gradients: its sum equals the uncompressed run's.
    powersgd_plain = results[0]["digits"][repr(PowerSGD(rank=1, start_iter=1000))]["after_20"]
    assert _relative(powersgd_plain, results[0]["digits"]["None"]["after_20"]) <= 1e-5
    assert results[0]["digits"][repr(PowerSGD(rank=2, start_iter=2))]["accuracy"] > 0.7  # compressed, still learns


def test_all_reduce_compressed_sums_in_half_precision(results):
    exact = np.array([3.0, 3000.0, -6.0e-3], np.float32)
    for result in results:
        np.testing.assert_allclose(result["bf16_sum"], exact, rtol=1e-2)
        np.testing.assert_allclose(result["fp16_sum"], exact, rtol=1e-3)


def test_all_reduce_compressed_refuses_powersgd():
    with pytest.raises(ValueError, match="Received: compression=PowerSGD"):
        all_reduce_compressed(torch.zeros(2), PowerSGD())


def test_strategies_without_ddp_refuse_compression():
    with pytest.raises(ValueError, match="CentralStorageStrategy.*Received: compression='bf16'"):
        stratagem.distribute.CentralStorageStrategy(communication_options=CommunicationOptions(compression="bf16"))
    with pytest.raises(ValueError, match="Received: compression='zstd'"):
        CommunicationOptions(compression="zstd")
