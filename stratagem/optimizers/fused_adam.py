"""Keras 3's Adam and AdamW rules run by torch's fused (or foreach) Adam kernel.

Keras adds epsilon to ``sqrt(v)`` before the bias correction, torch after; since ``sqrt(v) / c + eps ==
(sqrt(v) + epsilon) / c`` for ``eps = epsilon / c``, ``c = sqrt(1 - beta_2**t)``, setting torch's ``eps`` so each step
gives Keras' update exactly on torch's much faster kernel. Keras' decoupled weight decay is torch's AdamW decay, so
one class serves Adam and AdamW.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from typing_extensions import override

from stratagem._torch_internals import DeferredDynamoOptimizer, builtin_step
from stratagem.optimizers.rules import advance, clip_gradients, run_closure
from stratagem.optimizers.schedules import LearningRateSchedule

__all__ = ["KerasAdam"]


class KerasAdam(DeferredDynamoOptimizer, torch.optim.AdamW):
    """``keras.optimizers.Adam`` / ``AdamW`` (with ``amsgrad``) as a torch optimizer."""

    def __init__(self, params: Any, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999), epsilon: float = 1e-7,
                 amsgrad: bool = False, weight_decay: float = 0.0, clipnorm: float | None = None,
                 clipvalue: float | None = None, global_clipnorm: float | None = None, fused: bool | None = None,
                 schedule: LearningRateSchedule | None = None) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=epsilon, amsgrad=amsgrad, weight_decay=weight_decay, fused=fused)
        keras_keys = dict(epsilon=epsilon, clipnorm=clipnorm, clipvalue=clipvalue, global_clipnorm=global_clipnorm,
                          iterations=0)
        self.defaults.update(keras_keys)
        for group in self.param_groups:
            group.update(keras_keys)
        self.schedule = schedule

    @override
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = run_closure(closure)
        for group in self.param_groups:
            if group["clipnorm"] or group["clipvalue"] or group["global_clipnorm"]:
                with torch.no_grad():
                    clip_gradients([p.grad for p in group["params"] if p.grad is not None], group)
            if not group["iterations"]:
                self._resume_count(group)
            group["eps"] = group["epsilon"] / math.sqrt(1.0 - group["betas"][1] ** (group["iterations"] + 1))
        builtin_step(self, torch.optim.AdamW.step)  # super().step(), importing no torch._dynamo
        advance(self, self.schedule)
        return loss

    def _resume_count(self, group: dict[str, Any]) -> None:
        """Takes the step count from torch's state when it was put back without its group.

        A parameter server's restore writes per-parameter state only; Keras'
        bias corrections must go on counting from there.
        """
        stepped = [self.state[p]["step"] for p in group["params"] if "step" in self.state[p]]
        if stepped:
            group["iterations"] = int(stepped[0])
