"""The Estimator's checkpoint files: ``model_dir/model.ckpt-<global step>.pt``.

Each is a ``checkpoint.state`` training state with the global step as its counter (atomic, safe to read, earlier
versions upgraded). Only the chief calls ``save``; every process may read.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from stratagem.checkpoint import state as training_state
from stratagem.checkpoint.state import StateKind

if TYPE_CHECKING:
    from stratagem.models.model import Model

_NAME = re.compile(r"^model\.ckpt-(\d+)\.pt$")


def path_for(model_dir: str, global_step: int) -> str:
    return os.path.join(model_dir, f"model.ckpt-{global_step}.pt")


def all_checkpoints(model_dir: str) -> list[tuple[int, str]]:
    """``(global_step, path)`` of every checkpoint in ``model_dir``, oldest step first."""
    if not os.path.isdir(model_dir):
        return []
    found = [(int(match.group(1)), os.path.join(model_dir, name))
             for name in os.listdir(model_dir) if (match := _NAME.match(name))]
    return sorted(found)


def latest(model_dir: str) -> tuple[int, str] | None:
    """The checkpoint with the highest global step (``tf.train.latest_checkpoint``), or None."""
    found = all_checkpoints(model_dir)
    return found[-1] if found else None


def save(model: Model, model_dir: str, global_step: int, keep_checkpoint_max: int | None) -> str:
    """Writes ``model``'s state at ``global_step`` and deletes all but the newest ``keep_checkpoint_max``."""
    path = path_for(model_dir, global_step)
    training_state.write(path, training_state.module_state(model.module, model.optimizer), kind=StateKind.ESTIMATOR,
                         counters={"global_step": int(global_step)})
    if keep_checkpoint_max:
        for _, old in all_checkpoints(model_dir)[:-keep_checkpoint_max]:
            try:
                os.unlink(old)
            except FileNotFoundError:  # an evaluator may read it; deleting is best effort
                pass
    return path


def read(path: str) -> dict[str, Any]:
    """The checkpoint at ``path`` (``checkpoint.state.read``: safe, and upgraded if of an earlier version)."""
    return training_state.read(path, kind=StateKind.ESTIMATOR)


def restore(model: Model, path: str, *, optimizer: bool) -> int:
    """Loads the module's (and with ``optimizer`` the optimizer's) state from ``path``; returns its global step."""
    state = read(path)
    training_state.load_module_state(model.module, model.optimizer if optimizer else None, state)
    return int(state["counters"]["global_step"])
