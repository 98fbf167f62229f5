"""CentralStorageStrategy: two replicas match one on the global batch; optimizer state exists once.

A custom loop (``strategy.run``) must step through ``strategy.distribute_optimizer``:
a plain optimizer's step is refused, since nothing else sums the gradients.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import stratagem
from stratagem.errors import ConfigurationError
from stratagem.nn import compute_average_loss
from stratagem.testing import run_workers
from tests.dist._models import classification_data, small_cnn, state_as_numpy, train_small_cnn

pytestmark = pytest.mark.dist

OPTIMIZERS = ("sgd", "adam")
CUSTOM_BATCH, CUSTOM_STEPS = 8, 6


def _global_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = classification_data(CUSTOM_BATCH * CUSTOM_STEPS, seed=3)
    return [(torch.from_numpy(x[i : i + CUSTOM_BATCH]), torch.from_numpy(y[i : i + CUSTOM_BATCH]))
            for i in range(0, len(x), CUSTOM_BATCH)]


def _custom_loop(strategy: stratagem.distribute.Strategy) -> dict:
    """TF's custom-loop shape: a plain optimizer step is refused; the strategy's optimizer trains."""
    with strategy.scope():
        net = small_cnn()
        module = strategy.distribute_module(net)
        plain = torch.optim.SGD(net.parameters(), lr=0.1)
        central = strategy.distribute_optimizer(torch.optim.SGD(net.parameters(), lr=0.1))

    def step(optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        per_example = F.cross_entropy(module(x), y, reduction="none")
        compute_average_loss(per_example, global_batch_size=CUSTOM_BATCH).backward()
        optimizer.step()

    batches = list(strategy.experimental_distribute_dataset(_global_batches()))
    try:
        strategy.run(step, args=(plain, *batches[0]))
        plain_error = None
    except ConfigurationError as err:
        plain_error = str(err)
    for batch in batches:
        strategy.run(step, args=(central, *batch))
    return {"plain_error": plain_error, "state": state_as_numpy(net)}


def _hook_lifetime(world_size: int) -> dict:
    """The plain-step guard is torch's process-wide hook: it must go when its strategy goes."""
    from torch.optim.optimizer import _global_optimizer_pre_hooks  # torch 2.13: the process-wide step hooks

    before = len(_global_optimizer_pre_hooks)
    strategy = stratagem.distribute.CentralStorageStrategy(num_replicas=world_size)
    net = strategy.distribute_module(torch.nn.Linear(2, 1))
    during = len(_global_optimizer_pre_hooks)
    alive = weakref.ref(strategy)
    del strategy
    gc.collect()
    after_collect = len(_global_optimizer_pre_hooks)
    plain = torch.optim.SGD(net.parameters(), lr=0.1)  # its strategy is gone: nothing refuses it now
    net(torch.ones(1, 2)).sum().backward()
    plain.step()
    torn_down = stratagem.distribute.CentralStorageStrategy(num_replicas=world_size)
    torn_down.distribute_module(torch.nn.Linear(2, 1))
    with_second = len(_global_optimizer_pre_hooks)
    torn_down._teardown()  # what exit runs (the harness owns the process group, so only the hook goes)
    return {"before": before, "during": during, "collected": alive() is None, "after_collect": after_collect,
            "with_second": with_second, "after_teardown": len(_global_optimizer_pre_hooks)}


def _worker_central(rank: int, world_size: int) -> dict:
    central = stratagem.distribute.CentralStorageStrategy(num_replicas=world_size)
    with central.scope():
        results = {name: train_small_cnn(name) for name in OPTIMIZERS}
    results["custom_loop"] = _custom_loop(central)
    results["hook"] = _hook_lifetime(world_size)
    # The same job, same process group, as MirroredStrategy: each replica keeps its own optimizer state.
    mirrored = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    with mirrored.scope():
        results["mirrored_adam"] = train_small_cnn("adam")
    return results


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_workers(_worker_central, world_size=2, timeout_s=100)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_two_replicas_match_one_replica(results: list[dict], optimizer: str) -> None:
    reference = train_small_cnn(optimizer)
    for rank, result in enumerate(results):
        for name, expected in reference["state"].items():
            torch.testing.assert_close(torch.from_numpy(result[optimizer]["state"][name]), torch.from_numpy(expected),
                                       rtol=0, atol=1e-5, msg=lambda m: f"rank {rank}, {optimizer}, {name}: {m}")
        np.testing.assert_allclose(result[optimizer]["history"]["loss"], reference["history"]["loss"], rtol=1e-5)
        np.testing.assert_allclose(result[optimizer]["predict"], reference["predict"], rtol=1e-5, atol=1e-6)


def test_optimizer_state_exists_once_not_per_replica(results: list[dict]) -> None:
    chief, other = (r["adam"]["optimizer_state_bytes"] for r in results)
    mirrored = [r["mirrored_adam"]["optimizer_state_bytes"] for r in results]
    num_params = sum(v.size for v in results[0]["adam"]["state"].values())
    assert chief >= 2 * 4 * num_params  # Adam's two moments, float32, on the chief
    assert other == 0, "a non-chief replica must hold no optimizer state"
    assert mirrored[0] == mirrored[1] == chief  # MirroredStrategy: one full copy per replica
    assert chief + other == sum(mirrored) / 2


def test_custom_loop_plain_step_raises_and_strategy_optimizer_matches_one_replica(results: list[dict]) -> None:
    net = small_cnn()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in _global_batches():  # one replica on each global batch: the mean loss's gradient
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()
    for rank, result in enumerate(results):
        error = result["custom_loop"]["plain_error"]
        assert error is not None and "strategy.distribute_optimizer(optimizer)" in error and "Received:" in error
        for name, expected in state_as_numpy(net).items():
            np.testing.assert_allclose(result["custom_loop"]["state"][name], expected, rtol=0, atol=1e-5,
                                       err_msg=f"rank {rank}, {name}")


def test_plain_step_guard_is_removed_when_its_strategy_is_collected_or_torn_down(results: list[dict]) -> None:
    for rank, result in enumerate(results):
        hook = result["hook"]
        assert hook["during"] == hook["before"] + 1 and hook["collected"], (rank, hook)
        assert hook["after_collect"] == hook["before"], (rank, hook)
        assert hook["with_second"] == hook["before"] + 1 and hook["after_teardown"] == hook["before"], (rank, hook)
