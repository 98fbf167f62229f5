"""``TrainingState``: everything a restarted job needs to continue as if never stopped.

Captured: weights, optimizer state, where ``fit`` stands (the ``FitState``:
epoch, step, data position with the agreed shuffle seed), the running sums of
the epoch's metrics, every replica's torch RNG state (gathered to the chief),
the numpy and Python RNG states of the chief, the state of the other callbacks
(``get_state()`` / ``set_state()``) and state the strategy holds elsewhere
(``HoldsRemoteState``: parameter servers). Capturing is one collective (the
RNG gather), so every replica calls it; only the chief writes the file. Under a
strategy that ``ShardsVariables`` no process holds all the weights and optimizer
state: every replica writes its shards to a folder beside the file
(``checkpoint.sharded``), and the file holds the rest.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from typing import Any

import numpy as np
import torch

from stratagem.errors import CheckpointError
from stratagem.distribute.capabilities import HoldsRemoteState, ShardsVariables

FORMAT_VERSION = 1


def capture(model: Any, fit_state: Any, callbacks: list[Any], *, shards_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The training state of ``model`` and its ``fit_state`` now (call on every replica: it gathers RNG states).

    Under a strategy that ``ShardsVariables``, every replica first writes its
    shards of the weights and optimizer state to ``shards_dir``; the returned
    state then holds neither, and ``restore`` needs the same folder.
    """
    strategy = model.distribute_strategy
    sharded = isinstance(strategy, ShardsVariables)
    if sharded:
        if shards_dir is None:
            raise ValueError(f"{type(strategy).__name__} shards the weights, so capturing the training state needs "
                             "a folder for every replica's shards. Received: shards_dir=None")
        from stratagem.checkpoint.sharded import save_sharded  # torch's DCP takes seconds to import: only when used

        save_sharded(shards_dir, model)  # every replica writes its own shards; the folder appears complete or not at all
    all_torch_rng = _gather_rng_states(strategy)
    np_state: Any = np.random.get_state(legacy=True)  # ('MT19937', keys, pos, has_gauss, cached_gaussian)
    return {
        "format": FORMAT_VERSION,
        "world_size": strategy.num_replicas_in_sync,
        "sharded": sharded,
        "weights": None if sharded else {k: v.detach().cpu().clone() for k, v in model.module.state_dict().items()},
        "optimizer": None if sharded else model.optimizer.state_dict(),
        "position": json.dumps(fit_state.state()),
        "metrics": [[float(v) for v in metric.variables] for metric in model.metrics],
        "rng_torch": all_torch_rng,
        "rng_numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                      "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "rng_python": json.dumps(random.getstate()),
        "callbacks": json.dumps({_callback_key(i, cb): cb.get_state() for i, cb in enumerate(callbacks)
                                 if hasattr(cb, "get_state")}),
        "strategy": strategy.capture_remote_state() if isinstance(strategy, HoldsRemoteState) else None,
    }


def _gather_rng_states(strategy: Any) -> torch.Tensor:
    """Every replica's torch RNG state, one row each, in ONE all-reduce (the states have one size)."""
    mine = torch.get_rng_state().to(torch.int64)
    rows = torch.zeros((strategy.num_replicas_in_sync, mine.numel()), dtype=torch.int64)
    rows[strategy.replica_id_in_sync_group] = mine  # zeros elsewhere: the sum is the stack of every row
    return strategy.reduce("sum", rows.to(strategy.device), axis=None).cpu()


def restore(model: Any, fit_state: Any, callbacks: list[Any], state: dict[str, Any], *,
            shards_dir: str | os.PathLike[str] | None = None) -> None:
    """Puts ``model``, its optimizer, ``fit_state``, RNGs and callbacks back as captured.

    A sharded state's weights and optimizer state come from ``shards_dir``
    (resharded onto this job's replicas, which may be more or fewer).
    """
    strategy = model.distribute_strategy
    if isinstance(strategy, HoldsRemoteState):
        strategy.restore_remote_state(state.get("strategy"))
    if state.get("sharded"):
        if shards_dir is None:
            raise ValueError("This training state was captured with sharded weights, so restoring it needs the folder "
                             "of their shards. Received: shards_dir=None")
        from stratagem.checkpoint.sharded import load_sharded

        load_sharded(shards_dir, model)  # a collective: every replica reads the pieces its shards cover
    else:
        model.module.load_state_dict(state["weights"])
        model.optimizer.load_state_dict(state["optimizer"])
    fit_state.restore(json.loads(state["position"]))
    for metric, values in zip(model.metrics, state["metrics"]):
        for variable, value in zip(metric.variables, values):
            variable.fill_(value)
    rng = state["rng_torch"]
    row = strategy.replica_id_in_sync_group
    if int(state["world_size"]) != strategy.num_replicas_in_sync:
        warnings.warn(f"Backup was taken on {state['world_size']} replicas, restoring on "
                      f"{strategy.num_replicas_in_sync}: every replica takes the chief's torch RNG state.", stacklevel=2)
        row = 0
    torch.set_rng_state(rng[row].to(torch.uint8))
    np_rng = state["rng_numpy"]
    np.random.set_state(("MT19937", np_rng["keys"].numpy().astype(np.uint32), np_rng["pos"], np_rng["has_gauss"],
                         np_rng["cached_gaussian"]))
    random.setstate(_as_tuples(json.loads(state["rng_python"])))
    saved = json.loads(state["callbacks"])
    for i, callback in enumerate(callbacks):
        key = _callback_key(i, callback)
        if hasattr(callback, "set_state") and key in saved:
            callback.set_state(saved[key])


_KEYS = ("format", "world_size", "weights", "optimizer", "position", "metrics", "rng_torch", "rng_numpy",
         "rng_python", "callbacks")


def check_fits(model: Any, state: dict[str, Any], path: str) -> None:
    """Raises ``CheckpointError`` unless ``state`` is a whole training state of ``model``; changes nothing.

    Checked before ``restore`` so that a backup of another model (or a damaged
    one) leaves the model as it was, instead of half-loaded.
    """
    missing = [key for key in _KEYS if key not in state]
    if missing:
        raise CheckpointError(f"Backup {path!r} is not a whole training state: it lacks {missing}. It was not written "
                              "by BackupAndRestore, or by an incompatible version. Received: keys=" + str(sorted(state)))
    if state.get("sharded"):
        return  # the weights live in the shards folder, checked when it is read
    expected = model.module.state_dict()
    saved = state["weights"] if isinstance(state["weights"], dict) else {}
    absent = sorted(set(expected) - set(saved))
    extra = sorted(set(saved) - set(expected))
    reshaped = [f"{key}: {tuple(saved[key].shape)} vs {tuple(value.shape)}" for key, value in expected.items()
                if key in saved and tuple(getattr(saved[key], "shape", ())) != tuple(value.shape)]
    groups = [len(group["params"]) for group in state["optimizer"].get("param_groups", [])] \
        if isinstance(state["optimizer"], dict) else None
    own_groups = [len(group["params"]) for group in model.optimizer.state_dict()["param_groups"]]
    if absent or extra or reshaped or groups != own_groups:
        raise CheckpointError(
            f"Backup {path!r} holds the training state of another model: missing weights {absent[:5]}, unexpected "
            f"weights {extra[:5]}, other shapes {reshaped[:5]}, optimizer parameter groups {groups} vs {own_groups}. "
            "Use a separate backup_dir for each model.")


def _callback_key(index: int, callback: Any) -> str:
    return f"{index}:{type(callback).__name__}"


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value
