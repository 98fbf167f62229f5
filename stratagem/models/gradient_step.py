"""What a training step does between the forward pass and the new weights.

``GradientStep`` holds what ``Model.compile`` configures: autocast under the dtype policy, dynamic loss scaling,
gradient accumulation (DDP's ``no_sync`` on the micro-steps that do not update), and the update through the
strategy's optimizer. ``Model.train_step``, or an override, calls ``forward`` and ``minimize``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from stratagem._nest import map_structure
from stratagem._torch_internals import foreach
from stratagem.distribute.capabilities import StrategyOptimizer, SchedulesSteps, SupportsNoSync, has
from stratagem.distribute.strategy import Strategy
from stratagem.errors import ConfigurationError
from stratagem.mixed_precision import DTypePolicy, LossScaleOptimizer
from stratagem.optimizers import Optimizer

__all__ = ["GradientStep", "in_float32"]


class GradientStep:
    """Forward context, backward and update of one (micro-)step.

    Args:
        strategy: The model's strategy.
        optimizer: The model's ``stratagem.optimizers.Optimizer`` (maybe a ``LossScaleOptimizer``).
        updater: What ``step()`` applies the update through (``strategy.distribute_optimizer``).
        sync_module: The module as the strategy wrapped it (DDP), for ``no_sync``.
        policy: The model's dtype policy.
    """

    def __init__(self, strategy: Strategy, optimizer: Optimizer, updater: torch.optim.Optimizer | StrategyOptimizer,
                 sync_module: nn.Module, policy: DTypePolicy) -> None:
        self._strategy, self._optimizer, self._updater = strategy, optimizer, updater
        self._sync_module, self._policy = sync_module, policy
        self._steps = optimizer.gradient_accumulation_steps or 1
        self._scaler = optimizer if isinstance(optimizer, LossScaleOptimizer) else None
        self._micro_step = 0  # micro-steps accumulated since the last update
        # NOTE: DDP's backward leaves every replica the same all-reduced gradients (the same bits: each
        # replica receives the one reduced buffer), so each finds the same inf/NaN and decides alike
        # with no collective. Only where gradients can still differ after backward must replicas agree.
        self._gradients_may_differ = (strategy.num_replicas_in_sync > 1
                                      and not isinstance(sync_module, nn.parallel.DistributedDataParallel))
        if self._steps > 1 and has(strategy, SchedulesSteps):
            # NOTE: consecutive steps of a coordinator run on different workers, so no worker holds k of them.
            raise ConfigurationError(
                f"gradient_accumulation_steps needs consecutive steps on one replica, but {type(strategy).__name__} "
                "schedules each step on whichever worker is free. Drop gradient_accumulation_steps, or use a "
                f"synchronous strategy. Received: gradient_accumulation_steps={self._steps}")

    @property
    def updates_now(self) -> bool:
        """True when the next ``minimize`` applies an update (every step without accumulation)."""
        return self._micro_step + 1 == self._steps

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        """Run the forward pass in here: gradients cleared at a cycle's start, autocast, ``no_sync`` between updates."""
        if self._micro_step == 0:
            self._optimizer.zero_grad()
        sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if not self.updates_now and has(self._strategy, SupportsNoSync):
            sync = self._strategy.no_sync(self._sync_module)  # the k-th micro-step all-reduces the k-step sum
        with sync, self._policy.autocast(self._strategy.device):
            yield

    def minimize(self, loss: torch.Tensor) -> None:
        """Back-propagates ``loss`` (scaled under float16) and updates on every k-th call."""
        (self._scaler.scale_loss(loss) if self._scaler is not None else loss).backward()
        if not self.updates_now:
            self._micro_step += 1
            return
        self._micro_step = 0
        if self._scaler is None:
            if self._steps > 1:
                foreach.div_(_gradients(self._optimizer), float(self._steps))  # Keras: the average
            self._updater.step()  # the strategy's update: local, on the chief, or on the servers
            return
        found_inf = self._scaler.unscale(divisor=float(self._steps))
        if self._gradients_may_differ:
            # A strategy that sums in its step (CentralStorage) or shards gradients checked only this
            # replica's, so the replicas agree here: all skip or none (one small all-reduce per update).
            found_inf = self._strategy.reduce("max", found_inf.to(self._strategy.device), axis=None)
        finite = not bool(found_inf.item())
        if finite:
            self._updater.step()
        self._scaler.update(finite)


def in_float32(outputs: Any) -> Any:
    """Floating outputs of a mixed-precision forward pass as float32 (loss and metrics compute in float32, as Keras')."""
    return map_structure(
        lambda t: t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 else t,
        outputs)


def _gradients(optimizer: Optimizer) -> list[torch.Tensor]:
    groups = optimizer.torch_optimizer.param_groups if optimizer.torch_optimizer is not None else []
    return [p.grad for group in groups for p in group["params"] if p.grad is not None]
