"""The Estimator's checkpoint files: ``model_dir/model.ckpt-<global step>.pt``.

Each file holds the module's state, the optimizer's state and the global
step, written atomically by ``stratagem.checkpoint.io`` (a reader never sees
half a file) and read without running code from it. Only the chief calls
``save``; every process may read.
"""

from __future__ import annotations

import os
import re
from typing import Any

from stratagem.checkpoint.io import load_state, save_state

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


def save(model: Any, model_dir: str, global_step: int, keep_checkpoint_max: int | None) -> str:
    """Writes ``model``'s state at ``global_step`` and deletes all but the newest ``keep_checkpoint_max``."""
    path = path_for(model_dir, global_step)
    state: dict[str, Any] = {
        "global_step": int(global_step),
        "weights": {k: v.detach().cpu().clone() for k, v in model.module.state_dict().items()},
        "optimizer": model.optimizer.state_dict() if model.optimizer is not None else {},
    }
    save_state(path, state)
    if keep_checkpoint_max:
        for _, old in all_checkpoints(model_dir)[:-keep_checkpoint_max]:
            try:
                os.unlink(old)
            except FileNotFoundError:  # an evaluator may read it; deleting is best effort
                pass
    return path


def restore(model: Any, path: str, *, optimizer: bool) -> int:
    """Loads the module's (and with ``optimizer`` the optimizer's) state from ``path``; returns its global step."""
    state = load_state(path)
    model.module.load_state_dict(state["weights"])
    if optimizer and state.get("optimizer") and model.optimizer is not None:
        model.optimizer.load_state_dict(state["optimizer"])
    return int(state["global_step"])
