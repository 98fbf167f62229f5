"""``CentralStorageStrategy``: one copy of the variables' update state, on the chief.

One host, one process per replica. Each replica computes gradients on its share of the global batch; the gradients
are summed onto the chief (one ``reduce``), the chief alone runs the optimizer, so optimizer state (Adam's moments,
momentum buffers) exists once instead of once per replica, and the chief broadcasts the new values to every replica
(one ``broadcast``). The update equals one replica's on the global batch.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.hooks import RemovableHandle
from typing_extensions import override

from stratagem.distribute import collectives
from stratagem.distribute.capabilities import StrategyOptimizer
from stratagem.distribute.compression import refuse_compression
from stratagem.distribute.mirrored import OneHostStrategy
from stratagem.distribute.one_device import parse_device
from stratagem.distribute.options import CommunicationOptions
from stratagem.errors import ConfigurationError


class CentralStorageStrategy(OneHostStrategy):
    """Synchronous training with the optimizer, and its state, only on the chief.

    Args:
        compute_devices: Replica devices (``["cuda:0", "cuda:1"]``, ``["cpu:0", "cpu:1"]``); default every visible
            GPU, else one CPU replica.
        parameter_device: Where the central copy lives: it is the chief's replica device (``"cpu"`` or
            ``"cuda:0"``); another device is refused.
        num_replicas: Number of CPU replicas (a shorthand for ``compute_devices``).
        communication_options: ``CommunicationOptions`` (timeout, backend).

    Example:
        >>> strategy = CentralStorageStrategy(num_replicas=2)  # doctest: +SKIP
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = stratagem.Model(net)
        ...     model.compile(optimizer="adam", loss="mse")
    """

    def __init__(self, compute_devices: list[str] | None = None, parameter_device: str | None = None, *,
                 num_replicas: int | None = None, communication_options: CommunicationOptions | None = None) -> None:
        refuse_compression(communication_options, "CentralStorageStrategy", "sums gradients onto the chief with one reduce")
        self._parameter_device = parse_device(parameter_device) if parameter_device is not None else None
        self._guarded: dict[int, weakref.ref[torch.Tensor]] = {}  # parameters of distributed modules
        self._stepping_centrally = False
        self._step_hook: RemovableHandle | None = None
        super().__init__(compute_devices, num_replicas=num_replicas, communication_options=communication_options)
        if self._parameter_device is not None and self._parameter_device.type != self._device.type:
            raise ValueError(
                "parameter_device must be the chief replica's device type: the chief holds the central copy. "
                f"Received: parameter_device={parameter_device!r}, replica device={self._device}")

    @override
    def _wrap_module(self, module: nn.Module) -> nn.Module:
        module = module.to(self._device)
        if self._num_replicas > 1:
            self._guard_plain_steps(module)
            self._broadcast_from_chief([p.data for p in module.parameters()])  # every replica starts from them, as DDP
        return module

    def _broadcast_from_chief(self, tensors: list[torch.Tensor]) -> None:
        flat = collectives.flatten(tensors)
        with collectives.collective_errors("broadcast", timeout_s=self._timeout_s):
            dist.broadcast(flat, src=0)
        collectives.unflatten_into(flat, tensors)

    def _guard_plain_steps(self, module: nn.Module) -> None:
        """Makes a plain ``optimizer.step()`` over ``module``'s parameters raise (see ``_refuse_plain_step``).

        torch offers this check only as a hook on every optimizer's step, so it lives exactly as long as this
        strategy: it holds the strategy weakly, and ``_teardown`` or the strategy's collection removes it.
        """
        if self._step_hook is None:
            self._step_hook = register_optimizer_step_pre_hook(_PlainStepGuard(self))
            weakref.finalize(self, self._step_hook.remove)
        self._guarded.update({id(p): weakref.ref(p) for p in module.parameters()})

    @override
    def _teardown(self) -> None:
        if self._step_hook is not None:
            self._step_hook.remove()
            self._step_hook = None
            self._guarded.clear()
        super()._teardown()

    def _refuse_plain_step(self, optimizer: torch.optim.Optimizer) -> None:
        # NOTE: nothing sums gradients in backward here (no DDP): only the central step does. A plain step would apply
        # this replica's gradients alone, and the replicas would drift apart.
        if self._stepping_centrally:
            return
        params = (p for group in optimizer.param_groups for p in group["params"])
        if not any((ref := self._guarded.get(id(p))) is not None and ref() is p for p in params):
            return
        raise ConfigurationError(
            f"[rank {self._replica_id}/{self._num_replicas}] CentralStorageStrategy sums the replicas' gradients in "
            "its optimizer step, and this optimizer was not made through the strategy: its step() would apply this "
            "replica's gradients alone and the replicas' weights would drift apart. Step through the strategy: "
            f"`optimizer = strategy.distribute_optimizer(optimizer)`. Received: optimizer={type(optimizer).__name__}")

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> StrategyOptimizer:
        """``optimizer`` stepped centrally: gradients summed onto the chief, new values broadcast (``AppliesUpdates``)."""
        return StrategyOptimizer(optimizer, self._central_step)

    def _central_step(self, optimizer: torch.optim.Optimizer) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self._num_replicas == 1:
            optimizer.step()
            return
        # NOTE: each replica's loss is already divided by the GLOBAL batch, so the SUM of the replicas' gradients is
        # the one-device gradient of the batch.
        grads = collectives.flatten([p.grad if p.grad is not None else torch.zeros_like(p) for p in params])
        with collectives.collective_errors("reduce", timeout_s=self._timeout_s):
            dist.reduce(grads, dst=0, op=dist.ReduceOp.SUM)
        if self._replica_id == 0:
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            collectives.unflatten_into(grads, [p.grad for p in params])
            self._stepping_centrally = True
            try:
                optimizer.step()  # the only replica with optimizer state
            finally:
                self._stepping_centrally = False
        self._broadcast_from_chief([p.data for p in params])


class _PlainStepGuard:
    """torch's optimizer step pre-hook for one strategy, holding it weakly (the hook must not keep it alive)."""

    def __init__(self, strategy: CentralStorageStrategy) -> None:
        self._strategy = weakref.ref(strategy)

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        strategy = self._strategy()
        if strategy is not None:
            strategy._refuse_plain_step(optimizer)

