"""Learning-rate schedules (``keras.optimizers.schedules``): a rate for each step number.

A schedule passed as ``learning_rate=`` is asked for the rate of every step: step ``k`` (counted from 0, as Keras'
``optimizer.iterations``) trains with ``schedule(k)``. Schedules are pure functions of the step (the optimizer that
counts steps is in ``rules``); their ``name`` argument is kept for Keras compatibility.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence

__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay", "CosineDecay"]


class LearningRateSchedule(abc.ABC):
    """Base class of learning-rate schedules: ``schedule(step)`` returns the rate of that step."""

    @abc.abstractmethod
    def __call__(self, step: int) -> float:
        """The learning rate of step ``step`` (0 for the first step)."""


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (floored exponent if ``staircase``).

    Args:
        initial_learning_rate: The rate of step 0.
        decay_steps: Steps over which the rate is multiplied by ``decay_rate`` once; > 0.
        decay_rate: The factor per ``decay_steps``.
        staircase: If True, the rate changes every ``decay_steps`` steps, not every step.

    Example:
        >>> schedule = ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
        >>> round(schedule(20), 6)
        0.025
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float, staircase: bool = False,
                 name: str = "ExponentialDecay") -> None:
        _check_positive_steps(decay_steps)
        self.initial_learning_rate, self.decay_steps, self.decay_rate = initial_learning_rate, decay_steps, decay_rate
        self.staircase, self.name = staircase, name

    def __call__(self, step: int) -> float:
        exponent = step / self.decay_steps
        if self.staircase:
            exponent = math.floor(exponent)
        return self.initial_learning_rate * self.decay_rate ** exponent


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` up to step ``boundaries[0]`` (inclusive), ``values[1]`` up to ``boundaries[1]``, ...

    Args:
        boundaries: Increasing step numbers where the rate changes.
        values: One more rate than ``boundaries``: the rate of each interval.

    Example:
        >>> schedule = PiecewiseConstantDecay([100, 200], [1.0, 0.5, 0.1])
        >>> schedule(100), schedule(101), schedule(500)
        (1.0, 0.5, 0.1)
    """

    def __init__(self, boundaries: Sequence[int], values: Sequence[float], name: str = "PiecewiseConstant") -> None:
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                "The length of boundaries should be 1 less than the length of values: one rate before the first "
                f"boundary, one after each. Received: boundaries={list(boundaries)}, values={list(values)}")
        self.boundaries, self.values, self.name = list(boundaries), list(values), name

    def __call__(self, step: int) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if step <= boundary:
                return value
        return self.values[-1]


class CosineDecay(LearningRateSchedule):
    """Cosine decay over ``decay_steps``, after an optional linear warmup (Keras 3 ``CosineDecay``).

    Without ``warmup_target`` the rate falls from ``initial_learning_rate`` to ``alpha * initial_learning_rate``
    along half a cosine and stays there. With it, the rate first rises linearly from ``initial_learning_rate`` to
    ``warmup_target`` over ``warmup_steps``, then decays from ``warmup_target``.

    Args:
        initial_learning_rate: The rate of step 0.
        decay_steps: Steps of the cosine decay; > 0.
        alpha: The final rate as a fraction of the rate decayed from.
        warmup_target: The rate reached at the end of the warmup; None for no warmup.
        warmup_steps: Steps of the linear warmup.

    Example:
        >>> schedule = CosineDecay(0.0, decay_steps=100, warmup_target=0.1, warmup_steps=10)
        >>> round(schedule(5), 6), round(schedule(10), 6), round(schedule(110), 6)
        (0.05, 0.1, 0.0)
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, alpha: float = 0.0, name: str = "CosineDecay",
                 warmup_target: float | None = None, warmup_steps: int = 0) -> None:
        _check_positive_steps(decay_steps)
        self.initial_learning_rate, self.decay_steps, self.alpha, self.name = initial_learning_rate, decay_steps, alpha, name
        self.warmup_target, self.warmup_steps = warmup_target, warmup_steps

    def __call__(self, step: int) -> float:
        if self.warmup_target is None:
            return self._decayed(min(step, self.decay_steps), self.initial_learning_rate)
        step = min(step, self.decay_steps + self.warmup_steps)
        if step < self.warmup_steps:
            fraction = step / self.warmup_steps
            return self.initial_learning_rate + (self.warmup_target - self.initial_learning_rate) * fraction
        return self._decayed(step - self.warmup_steps, self.warmup_target)

    def _decayed(self, step: float, decay_from: float) -> float:
        cosine = 0.5 * (1.0 + math.cos(math.pi * step / self.decay_steps))
        return decay_from * ((1.0 - self.alpha) * cosine + self.alpha)


def _check_positive_steps(decay_steps: int) -> None:
    if decay_steps <= 0:
        raise ValueError(f"Argument `decay_steps` must be > 0: the schedule divides by it. Received: decay_steps={decay_steps}")
