"""``RunConfig``: where an Estimator keeps its checkpoints, how often it writes them, and its strategies.

The task (``task_type``, ``task_id``, ``is_chief``) is read from ``TF_CONFIG`` as TF's ``RunConfig`` reads it, so a
script can tell an ``evaluator`` task from the trainers before it builds a strategy.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from stratagem.distribute.cluster import CHIEF, WORKER, TFConfigClusterResolver

_DEFAULT_SECS = 600  # TF's default when neither save_checkpoints_steps nor _secs is given


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """``tf.estimator.RunConfig``.

    Args:
        model_dir: Checkpoint folder (``Estimator``'s ``model_dir`` wins if both are given and equal).
        tf_random_seed: Seeds torch, numpy and Python's RNGs when the Estimator is made.
        save_checkpoints_steps: Save every N global steps. Exclusive with ``save_checkpoints_secs``.
        save_checkpoints_secs: Save every N seconds (600 when neither is set, as in TF).
        keep_checkpoint_max: Checkpoints kept; older ones are deleted (None or 0 keeps all).
        log_step_count_steps: Log loss and global_step/sec every N steps (chief only).
        train_distribute: The ``Strategy`` ``train`` runs under (None: this process alone).
        eval_distribute: The ``Strategy`` ``evaluate`` runs under (None: each process evaluates all of the input
            alone, as TF evaluates without a strategy).

    Raises:
        ValueError: If both checkpoint intervals are set, or a count is negative.
    """

    model_dir: str | None = None
    tf_random_seed: int | None = None
    save_checkpoints_steps: int | None = None
    save_checkpoints_secs: float | None = None
    keep_checkpoint_max: int | None = 5
    log_step_count_steps: int = 100
    train_distribute: Any = None
    eval_distribute: Any = None

    def __post_init__(self) -> None:
        if self.save_checkpoints_steps is not None and self.save_checkpoints_secs is not None:
            raise ValueError("save_checkpoints_steps and save_checkpoints_secs are exclusive (TF refuses both). "
                             f"Set one. Received: save_checkpoints_steps={self.save_checkpoints_steps}, "
                             f"save_checkpoints_secs={self.save_checkpoints_secs}")
        for name in ("save_checkpoints_steps", "save_checkpoints_secs", "keep_checkpoint_max"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be positive or None. Received: {name}={value}")
        if self.log_step_count_steps is not None and self.log_step_count_steps <= 0:
            raise ValueError(f"log_step_count_steps must be positive. Received: {self.log_step_count_steps}")
        if self.save_checkpoints_steps is None and self.save_checkpoints_secs is None:
            object.__setattr__(self, "save_checkpoints_secs", _DEFAULT_SECS)
        if self.model_dir is not None:
            object.__setattr__(self, "model_dir", os.fspath(self.model_dir))

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (TF's ``RunConfig.replace``)."""
        if "save_checkpoints_steps" in changes and "save_checkpoints_secs" not in changes:
            changes["save_checkpoints_secs"] = None
        return dataclasses.replace(self, **changes)

    @property
    def task_type(self) -> str:
        """This task's job in ``TF_CONFIG`` (``"worker"`` without one, as in TF)."""
        return self._task()[0]

    @property
    def task_id(self) -> int:
        return self._task()[1]

    @property
    def is_chief(self) -> bool:
        """The chief task (or worker 0 of a cluster without one); the trainers that write checkpoints."""
        if self.train_distribute is not None:
            return bool(self.train_distribute.is_chief)
        task_type, task_id = self._task()
        resolver = tf_config_resolver()
        has_chief = resolver is not None and bool(resolver.cluster_spec().as_dict().get(CHIEF))
        return task_type == CHIEF or (task_type == WORKER and task_id == 0 and not has_chief)

    def _task(self) -> tuple[str, int]:
        resolver = tf_config_resolver()
        if resolver is None or resolver.task_type is None:
            return WORKER, 0
        return str(resolver.task_type), int(resolver.task_id or 0)


def tf_config_resolver() -> TFConfigClusterResolver | None:
    if not os.environ.get("TF_CONFIG", "").strip():
        return None
    resolver = TFConfigClusterResolver()  # a malformed TF_CONFIG raises ConfigurationError with the fix
    return resolver if resolver.cluster_spec().as_dict() else None


__all__ = ["RunConfig"]
