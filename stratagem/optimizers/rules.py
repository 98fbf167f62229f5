"""torch optimizers that step by Keras 3's update rules, over all parameters at once.

Each is a ``torch.optim.Optimizer`` (strategies step it, ``state_dict`` saves it) whose ``step`` is
``keras.optimizers.<Name>``'s rule in Keras' order: clip the gradients, decay the weights decoupled
(``w -= w * weight_decay * lr``), apply the rule, count the step, with torch's multi-tensor kernels
(``_torch_internals.foreach``). The constructor arguments are the param-group keys, so a parameter server can
rebuild a twin. Adam and AdamW are in ``fused_adam``; the Keras-facing classes in ``algorithms``.
"""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import override

from stratagem._torch_internals import DeferredDynamoOptimizer, foreach
from stratagem.optimizers.schedules import LearningRateSchedule

__all__ = ["KerasSGD", "KerasRMSprop", "KerasAdagrad", "KerasAdadelta", "KerasAdamax", "KerasNadam", "KerasLion"]

Tensors = list[torch.Tensor]


def run_closure(closure: Any) -> Any:
    """Evaluates torch's optional ``step(closure)`` argument with gradients on; returns its loss."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def clip_gradients(grads: Tensors, group: dict[str, Any]) -> None:
    """Clips ``grads`` in place as Keras does: by each tensor's norm, by their global norm, or by value."""
    if group["clipnorm"]:
        # Keras: g * clipnorm / max(||g||, clipnorm), each tensor on its own.
        # max(||g||, clipnorm), out of place: sharded (DTensor) gradients have no _foreach_maximum,
        # and their norms are partial sums that an in-place op cannot turn into whole ones.
        scales = foreach.clamp_min(foreach.norm(grads), group["clipnorm"])
        foreach.reciprocal_(scales)
        foreach.mul_(scales, group["clipnorm"])
        foreach.mul_(grads, scales)
    elif group["global_clipnorm"]:
        norm = torch.linalg.vector_norm(torch.stack(foreach.norm(grads)))
        foreach.mul_(grads, group["global_clipnorm"] / torch.clamp(norm, min=group["global_clipnorm"]))
    elif group["clipvalue"]:
        foreach.clamp_min_(grads, -group["clipvalue"])
        foreach.clamp_max_(grads, group["clipvalue"])


def advance(optimizer: torch.optim.Optimizer, schedule: LearningRateSchedule | None) -> None:
    """Counts a step; with a schedule, the group's ``lr`` becomes the next step's rate."""
    for group in optimizer.param_groups:
        group["iterations"] += 1
        if schedule is not None:
            # NOTE: the rate in the group is always the one the next step uses, so that
            # `learning_rate` reads what Keras reads and a parameter server is sent it.
            group["lr"] = float(schedule(group["iterations"]))


class KerasRule(DeferredDynamoOptimizer):
    """Base of the rules: clipping, weight decay and step counting; a subclass writes ``_update``."""

    def __init__(self, params: Any, defaults: dict[str, Any], *, weight_decay: float = 0.0,
                 clipnorm: float | None = None, clipvalue: float | None = None, global_clipnorm: float | None = None,
                 schedule: LearningRateSchedule | None = None) -> None:
        # The arguments every rule takes: a subclass passes them on (``**common``), and they are group keys too.
        super().__init__(params, {**defaults, "weight_decay": weight_decay, "clipnorm": clipnorm,
                                  "clipvalue": clipvalue, "global_clipnorm": global_clipnorm, "iterations": 0})
        self.schedule = schedule

    @override
    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = run_closure(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            clip_gradients(grads, group)
            if group["weight_decay"]:
                foreach.mul_(params, 1.0 - group["weight_decay"] * group["lr"])
            self._update(group, params, grads, self._count_step(params))
        advance(self, self.schedule)
        return loss

    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        """Applies the rule to ``params`` at ``step`` (1-based, Keras' ``iterations + 1``)."""
        raise NotImplementedError

    def _count_step(self, params: Tensors) -> int:
        """Counts the step in each parameter's state; returns the first one's count.

        NOTE: counted per parameter (as torch counts) rather than once, so that a
        parameter server's snapshot, which saves per-parameter state, keeps it.
        """
        for p in params:
            state = self.state[p]
            state["step"] = state.get("step", 0) + 1
        return self.state[params[0]]["step"]

    def _slots(self, params: Tensors, name: str, fill: float = 0.0) -> Tensors:
        """Each parameter's ``name`` state tensor, made (filled with ``fill``) on first use."""
        slots = []
        for p in params:
            state = self.state[p]
            if name not in state:
                state[name] = torch.full_like(p, fill, memory_format=torch.preserve_format)
            slots.append(state[name])
        return slots


class KerasSGD(KerasRule):
    """``keras.optimizers.SGD``: ``m = momentum * m - lr * g; w += m`` (nesterov: ``w += momentum * m - lr * g``)."""

    def __init__(self, params: Any, lr: float = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 **common: Any) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov), **common)

    @override
    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        lr, momentum = group["lr"], group["momentum"]
        if not momentum:
            foreach.add_(params, grads, alpha=-lr)
            return
        # NOTE: the buffer holds lr * g terms (torch's holds g), so a changed rate
        # applies to new gradients only, as in Keras.
        buffers = self._slots(params, "momentum")
        foreach.mul_(buffers, momentum)
        foreach.add_(buffers, grads, alpha=-lr)
        if group["nesterov"]:
            foreach.add_(params, buffers, alpha=momentum)
            foreach.add_(params, grads, alpha=-lr)
        else:
            foreach.add_(params, buffers)


class KerasRMSprop(KerasRule):
    """``keras.optimizers.RMSprop``: ``w -= lr * g / sqrt(v + epsilon)`` (centered: ``v - mean(g)**2 + epsilon``)."""

    def __init__(self, params: Any, lr: float = 0.001, rho: float = 0.9, momentum: float = 0.0, epsilon: float = 1e-7,
                 centered: bool = False, **common: Any) -> None:
        super().__init__(params, dict(lr=lr, rho=rho, momentum=momentum, epsilon=epsilon, centered=centered), **common)

    @override
    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        rho, lr = group["rho"], group["lr"]
        velocities = self._slots(params, "velocity")
        foreach.mul_(velocities, rho)
        foreach.addcmul_(velocities, grads, grads, value=1.0 - rho)
        if group["centered"]:
            averages = self._slots(params, "average_gradient")
            foreach.mul_(averages, rho)
            foreach.add_(averages, grads, alpha=1.0 - rho)
            denominators = foreach.addcmul(velocities, averages, averages, value=-1.0)
            foreach.add_(denominators, group["epsilon"])
        else:
            denominators = foreach.add(velocities, group["epsilon"])  # Keras: inside the sqrt
        foreach.sqrt_(denominators)
        if not group["momentum"]:
            foreach.addcdiv_(params, grads, denominators, value=-lr)
            return
        buffers = self._slots(params, "momentum")
        foreach.mul_(buffers, group["momentum"])
        foreach.addcdiv_(buffers, grads, denominators, value=lr)
        foreach.sub_(params, buffers)


class KerasAdagrad(KerasRule):
    """``keras.optimizers.Adagrad``: ``a += g**2; w -= lr * g / sqrt(a + epsilon)``."""

    def __init__(self, params: Any, lr: float = 0.001, initial_accumulator_value: float = 0.1, epsilon: float = 1e-7,
                 **common: Any) -> None:
        super().__init__(params, dict(lr=lr, initial_accumulator_value=initial_accumulator_value, epsilon=epsilon),
                         **common)

    @override
    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        accumulators = self._slots(params, "accumulator", group["initial_accumulator_value"])
        foreach.addcmul_(accumulators, grads, grads)
        denominators = foreach.add(accumulators, group["epsilon"])
        foreach.sqrt_(denominators)
        foreach.addcdiv_(params, grads, denominators, value=-group["lr"])


class KerasAdadelta(KerasRule):
    """``keras.optimizers.Adadelta``: step ``-sqrt(d + eps) / sqrt(a + eps) * g``, scaled by ``lr``."""

    def __init__(self, params: Any, lr: float = 0.001, rho: float = 0.95, epsilon: float = 1e-7,
                 **common: Any) -> None:
        super().__init__(params, dict(lr=lr, rho=rho, epsilon=epsilon), **common)

    @override
    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        rho, epsilon = group["rho"], group["epsilon"]
        accumulated_grads = self._slots(params, "accumulated_grad")
        accumulated_deltas = self._slots(params, "accumulated_delta_var")
        foreach.mul_(accumulated_grads, rho)
        foreach.addcmul_(accumulated_grads, grads, grads, value=1.0 - rho)
        deltas = foreach.add(accumulated_deltas, epsilon)  # the step, without its minus sign
        foreach.sqrt_(deltas)
        foreach.mul_(deltas, grads)
        denominators = foreach.add(accumulated_grads, epsilon)
        foreach.sqrt_(denominators)
        foreach.div_(deltas, denominators)
        foreach.mul_(accumulated_deltas, rho)
        foreach.addcmul_(accumulated_deltas, deltas, deltas, value=1.0 - rho)
        foreach.add_(params, deltas, alpha=-group["lr"])


class _MomentsRule(KerasRule):
    """Takes ``beta_1``, ``beta_2`` and ``epsilon`` (Adamax and Nadam)."""

    def __init__(self, params: Any, lr: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                 **common: Any) -> None:
        super().__init__(params, dict(lr=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon), **common)


class KerasAdamax(_MomentsRule):
    """``keras.optimizers.Adamax``: ``w -= lr * m / ((1 - beta_1**t) * (u + epsilon))``, ``u`` the infinity norm."""

    @override
    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        beta_1 = group["beta_1"]
        moments, norms = self._slots(params, "momentum"), self._slots(params, "norm")
        foreach.lerp_(moments, grads, 1.0 - beta_1)
        foreach.mul_(norms, group["beta_2"])
        foreach.maximum_(norms, foreach.abs(grads))
        denominators = foreach.add(norms, group["epsilon"])
        step_size = group["lr"] / (1.0 - beta_1 ** step)
        foreach.addcdiv_(params, moments, denominators, value=-step_size)


class KerasNadam(_MomentsRule):
    """``keras.optimizers.Nadam``: Adam with Nesterov momentum and Dozat's momentum schedule (0.96 decay)."""

    @override
    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        beta_1, beta_2 = group["beta_1"], group["beta_2"]
        u_t = beta_1 * (1.0 - 0.5 * 0.96 ** step)
        u_next = beta_1 * (1.0 - 0.5 * 0.96 ** (step + 1))
        u_product = self.state[params[0]].get("u_product", 1.0) * u_t  # Keras: one variable, the product of the u's
        for p in params:
            self.state[p]["u_product"] = u_product
        moments, velocities = self._slots(params, "momentum"), self._slots(params, "velocity")
        foreach.lerp_(moments, grads, 1.0 - beta_1)
        foreach.mul_(velocities, beta_2)
        foreach.addcmul_(velocities, grads, grads, value=1.0 - beta_2)
        m_hat = foreach.mul(moments, u_next / (1.0 - u_product * u_next))
        foreach.add_(m_hat, grads, alpha=(1.0 - u_t) / (1.0 - u_product))
        denominators = foreach.div(velocities, 1.0 - beta_2 ** step)
        foreach.sqrt_(denominators)
        foreach.add_(denominators, group["epsilon"])
        foreach.addcdiv_(params, m_hat, denominators, value=-group["lr"])


class KerasLion(KerasRule):
    """``keras.optimizers.Lion``: ``w -= lr * sign(beta_1 * m + (1 - beta_1) * g)``; then ``m`` moves by ``beta_2``."""

    def __init__(self, params: Any, lr: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.99,
                 **common: Any) -> None:
        super().__init__(params, dict(lr=lr, beta_1=beta_1, beta_2=beta_2), **common)

    @override
    def _update(self, group: dict[str, Any], params: Tensors, grads: Tensors, step: int) -> None:
        moments = self._slots(params, "momentum")
        directions = foreach.lerp(moments, grads, 1.0 - group["beta_1"])
        foreach.sign_(directions)
        foreach.add_(params, directions, alpha=-group["lr"])
        foreach.lerp_(moments, grads, 1.0 - group["beta_2"])

