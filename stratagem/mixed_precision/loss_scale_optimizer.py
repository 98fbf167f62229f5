"""``LossScaleOptimizer``: Keras 3's dynamic loss scaling for float16 training.

float16 gradients underflow, so the loss is scaled up before backward and the gradients down before the update. Keras
3's rule: start at ``initial_scale`` (2**15); a step with an inf or NaN gradient is skipped and halves the scale;
``dynamic_growth_steps`` (2000) finite steps in a row double it. Unscaling and the check are one fused kernel.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
from typing_extensions import override

from stratagem._torch_internals import unscale_and_check_finite_
from stratagem.optimizers.optimizer import LearningRate, Optimizer

__all__ = ["LossScaleOptimizer"]


class LossScaleOptimizer(Optimizer):
    """Wraps an optimizer with dynamic loss scaling (``keras.mixed_precision.LossScaleOptimizer``).

    ``Model.compile`` wraps the optimizer under ``"mixed_float16"``. In a custom loop, scale the loss and step through
    this object: ``step()`` unscales, skips the update if a gradient is not finite, and adjusts the scale.

    Args:
        inner_optimizer: The ``stratagem.optimizers.Optimizer`` (or a Keras name) to wrap.
        initial_scale: The first loss scale.
        dynamic_growth_steps: Finite steps in a row after which the scale doubles.
        name: The optimizer's name.

    Example:
        >>> optimizer = LossScaleOptimizer(stratagem.optimizers.SGD(0.1))  # doctest: +SKIP
        >>> torch_optimizer = optimizer.build(module.parameters(), torch.device("cuda"))  # doctest: +SKIP
        >>> with stratagem.mixed_precision.autocast("cuda"):  # doctest: +SKIP
        ...     loss = loss_fn(y, module(x).float())
        >>> optimizer.scale_loss(loss).backward()  # doctest: +SKIP
        >>> optimizer.step()  # skipped (and the scale halved) if a gradient is inf or NaN  # doctest: +SKIP
        >>> optimizer.zero_grad()  # doctest: +SKIP
    """

    def __init__(self, inner_optimizer: Any, initial_scale: float = 2.0**15, dynamic_growth_steps: int = 2000,
                 name: str | None = None, **kwargs: Any) -> None:
        if kwargs:
            raise ValueError(f"LossScaleOptimizer does not support arguments {sorted(kwargs)} (as in Keras): set them "
                             f"on the inner optimizer. Received: {kwargs!r}")
        if not initial_scale > 0 or not isinstance(dynamic_growth_steps, int) or dynamic_growth_steps < 1:
            raise ValueError("initial_scale must be positive and dynamic_growth_steps a positive int. Received: "
                             f"initial_scale={initial_scale!r}, dynamic_growth_steps={dynamic_growth_steps!r}")
        from stratagem import optimizers

        inner = optimizers.get(inner_optimizer)
        if isinstance(inner, LossScaleOptimizer):
            raise ValueError("The inner optimizer is already a LossScaleOptimizer: scaling twice would square the scale. "
                             f"Received: inner_optimizer={inner!r}")
        self.inner_optimizer = inner
        self.gradient_accumulation_steps = inner.gradient_accumulation_steps  # set on the inner one, as in Keras
        self.initial_scale, self.dynamic_growth_steps = float(initial_scale), dynamic_growth_steps
        self.name = name or "loss_scale_optimizer"
        self._scale = float(initial_scale)
        self._finite_in_a_row = 0
        self.skipped_steps = 0
        self.torch_optimizer = None

    # ---- the optimizer's surface, delegated -------------------------------------------------
    @property  # type: ignore[override]
    def learning_rate(self) -> LearningRate:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self.inner_optimizer.learning_rate = value

    lr = learning_rate

    @override
    def build(self, params: Iterable[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        self.torch_optimizer = self.inner_optimizer.build(params, device)
        return self.torch_optimizer

    @override
    def _make(self, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
        raise NotImplementedError("LossScaleOptimizer builds through its inner optimizer")  # build() is overridden

    # ---- loss scaling -------------------------------------------------------------------------
    @property
    def dynamic_scale(self) -> float:
        """The current loss scale."""
        return self._scale

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` times the current scale: back-propagate this one."""
        return loss * self._scale

    def unscale(self, divisor: float = 1.0) -> torch.Tensor:
        """Divides every gradient by the scale and ``divisor`` (accumulation) in place; 1.0 if one is inf/NaN."""
        grads: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
        for group in self._built().param_groups:
            for parameter in group["params"]:
                if parameter.grad is not None:
                    grads[(parameter.grad.device, parameter.grad.dtype)].append(parameter.grad)
        found_inf = torch.zeros(1)
        for (device, _), tensors in grads.items():
            found = torch.zeros(1, device=device)
            inverse = torch.full((1,), 1.0 / (self._scale * divisor), device=device)
            unscale_and_check_finite_(tensors, found, inverse)
            found_inf = torch.maximum(found_inf, found.cpu())
        return found_inf

    def update(self, finite: bool) -> None:
        """Keras 3's rule after a step: count a finite one (the scale doubles after ``dynamic_growth_steps``
        of them in a row), or halve the scale and count a skip."""
        if not finite:
            self._scale /= 2.0
            self._finite_in_a_row = 0
            self.skipped_steps += 1
            return
        self._finite_in_a_row += 1
        if self._finite_in_a_row == self.dynamic_growth_steps:
            self._scale *= 2.0
            self._finite_in_a_row = 0

    @override
    def step(self) -> None:
        """Unscales, applies the inner optimizer's update if every gradient is finite, and adjusts the scale."""
        finite = not bool(self.unscale().item())
        if finite:
            self._built().step()
        self.update(finite)

    # ---- state ------------------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner_optimizer.state_dict(),
                "loss_scale": {"scale": self._scale, "finite_in_a_row": self._finite_in_a_row,
                               "skipped_steps": self.skipped_steps}}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner_optimizer.load_state_dict(state["inner"])
        scaling = state["loss_scale"]
        self._scale = float(scaling["scale"])
        self._finite_in_a_row, self.skipped_steps = int(scaling["finite_in_a_row"]), int(scaling["skipped_steps"])

    def __repr__(self) -> str:
        return f"LossScaleOptimizer({type(self.inner_optimizer).__name__}, dynamic_scale={self._scale:g})"
