"""``has(strategy, Protocol)``: the optional-capability check the training loop makes, some of it every step."""

from __future__ import annotations

import contextlib
import timeit

import pytest
import torch

from stratagem.distribute import (
    CentralStorageStrategy, MirroredStrategy, MultiWorkerMirroredStrategy, OneDeviceStrategy,
    ParameterServerStrategy,
)
from stratagem.distribute.capabilities import (
    AgreesThroughStore, AppliesUpdates, HoldsRemoteState, NeedsCoordinator, SchedulesSteps, ShardsVariables,
    SupportsNoSync, has,
)
from stratagem.distribute.sharded_data_parallel import ShardedDataParallelStrategy

PROTOCOLS = (AgreesThroughStore, AppliesUpdates, HoldsRemoteState, NeedsCoordinator, SchedulesSteps,
             ShardsVariables, SupportsNoSync)
STRATEGIES = (CentralStorageStrategy, MirroredStrategy, MultiWorkerMirroredStrategy, OneDeviceStrategy,
              ParameterServerStrategy, ShardedDataParallelStrategy)

# What each strategy can do, as the README's "Strategy interface" paragraph lists it.
EXPECTED = {
    CentralStorageStrategy: {AgreesThroughStore, AppliesUpdates, SupportsNoSync},
    MirroredStrategy: {AgreesThroughStore, SupportsNoSync},
    MultiWorkerMirroredStrategy: {AgreesThroughStore, SupportsNoSync},
    OneDeviceStrategy: set(),
    ParameterServerStrategy: {AppliesUpdates, HoldsRemoteState, NeedsCoordinator, SchedulesSteps},
    ShardedDataParallelStrategy: {AgreesThroughStore, ShardsVariables, SupportsNoSync},
}


@pytest.mark.parametrize("strategy_class", STRATEGIES, ids=lambda cls: cls.__name__)
def test_has_answers_what_each_strategy_class_implements(strategy_class: type) -> None:
    strategy = object.__new__(strategy_class)  # no process group: only the class matters
    assert {protocol for protocol in PROTOCOLS if has(strategy, protocol)} == EXPECTED[strategy_class]
    for protocol in PROTOCOLS:  # the same answer as isinstance, the check it replaces
        assert has(strategy, protocol) == isinstance(strategy, protocol)


def test_has_is_structural_like_the_protocols() -> None:
    class Accumulates:  # no strategy base: a class that defines the method has the capability
        def no_sync(self, module: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
            return contextlib.nullcontext()

    assert has(Accumulates(), SupportsNoSync)
    assert not has(Accumulates(), SchedulesSteps)
    assert not has(object(), SupportsNoSync)


def test_a_negative_check_costs_under_a_microsecond() -> None:
    # Strategy.run and the gradient step ask on every step; isinstance against a runtime protocol took 7-12 us
    # (Python 3.11), has 0.15-0.25 us. The bound leaves room for a loaded machine.
    strategy = OneDeviceStrategy("cpu")
    seconds = min(timeit.repeat(lambda: has(strategy, NeedsCoordinator), number=2000, repeat=5)) / 2000
    assert seconds < 2e-6, f"has() took {seconds * 1e6:.2f} us per call"
