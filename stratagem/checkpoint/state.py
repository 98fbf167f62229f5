"""The one training-state format (``write``/``read``), and ``fit``'s ``capture``/``restore``.

A training state is what a restarted job needs to continue as if never stopped: the weights and optimizer state
(``module_state``), the ``kind`` of writer (``BackupAndRestore``, the Estimator, ``hvd.elastic``'s ``TorchState``)
and that writer's ``counters``. ``write`` is atomic (``checkpoint.io``); ``read`` runs no code from the file
(``checkpoint.unpickling``) and upgrades earlier versions' layouts. Under a strategy that ``ShardsVariables`` every
replica writes its shards to ``shards_dir_for(path)`` (torch's DCP) and the file holds the rest. ``capture`` adds
where ``fit`` stands, the metrics' sums, the RNG states (every replica's torch RNG, the chief's numpy and Python
ones), the callbacks' state and the strategy's remote state; gathering the torch RNG states is a collective, so
every replica calls it and only the chief writes. Not here: ``Model.save_weights``/``Model.save``
(``models.saving``) and ``tf.train.Checkpoint`` (``stratagem.train``).
"""

from __future__ import annotations

import enum
import json
import os
import random
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from stratagem.checkpoint.io import load_state, save_state
from stratagem.distribute.capabilities import HoldsRemoteState, ShardsVariables, has
from stratagem.errors import CheckpointError

if TYPE_CHECKING:  # the model and callback modules import this one
    from stratagem.callbacks.callback import Callback
    from stratagem.distribute.strategy import Strategy
    from stratagem.models.fit_state import FitState
    from stratagem.models.model import Model

# 1: BackupAndRestore's file before the Estimator and hvd.elastic shared the format (each had its own then).
FORMAT_VERSION = 2


class StateKind(str, enum.Enum):
    """Which writer made a training-state file, and so which ``counters`` it holds."""

    BACKUP = "backup"  # BackupAndRestore: fit's sections too; counters: fit_index
    ESTIMATOR = "estimator"  # Estimator's model.ckpt-<step>.pt; counters: global_step
    ELASTIC = "elastic"  # hvd.elastic's TorchState; counters: values, samplers


_WRITERS = {StateKind.BACKUP: "BackupAndRestore", StateKind.ESTIMATOR: "an Estimator",
            StateKind.ELASTIC: "hvd.elastic (TorchState.commit)"}


def module_state(module: torch.nn.Module | None, optimizer: Any) -> dict[str, Any]:
    """The part every training state holds: copies of ``module``'s weights (on the CPU) and ``optimizer``'s state."""
    return {
        "weights": {k: v.detach().cpu().clone() for k, v in module.state_dict().items()} if module is not None else {},
        "optimizer": optimizer.state_dict() if optimizer is not None else {},
        "sharded": False,
    }


def load_module_state(module: torch.nn.Module | None, optimizer: Any, state: dict[str, Any]) -> None:
    """Puts ``module_state``'s part back: the weights, and the optimizer state if ``optimizer`` is given and saved."""
    if module is not None:
        module.load_state_dict(state["weights"])
    if optimizer is not None and state.get("optimizer"):
        optimizer.load_state_dict(state["optimizer"])


def shards_dir_for(path: str | os.PathLike[str]) -> Path:
    """The folder of the replicas' shards of the training-state file ``path``, in its sharded form."""
    path = Path(path)
    return path.with_name(f"{path.stem}.shards")


def write(path: str | os.PathLike[str], state: dict[str, Any], *, kind: StateKind, counters: dict[str, Any]) -> None:
    """Writes the training-state file ``path`` atomically: ``state`` (``module_state`` and more), kind and counters."""
    save_state(path, {**state, "format": FORMAT_VERSION, "kind": StateKind(kind).value, "counters": counters})


def read(path: str | os.PathLike[str], *, kind: StateKind) -> dict[str, Any]:
    """Reads a training-state file written by ``kind``'s writer, of this version or an earlier one.

    Raises:
        CheckpointError: If the file is missing, damaged or unsafe, is not a training state,
            was written by another kind of writer, or by a newer stratagem.
    """
    path = str(path)
    state = _upgraded(load_state(path), path)
    kind = StateKind(kind)
    if state["kind"] != kind.value:
        written_by = _WRITERS.get(StateKind(state["kind"])) if state["kind"] in StateKind._value2member_map_ else None
        raise CheckpointError(
            f"{path!r} is the training state of {written_by or repr(state['kind'])}, not of {_WRITERS[kind]}: "
            f"each keeps its own file. Point {_WRITERS[kind]} at its own file or folder. "
            f"Received: kind={state['kind']!r}, expected {kind.value!r}")
    return state


def _upgraded(state: dict[str, Any], path: str) -> dict[str, Any]:
    """``state`` in this version's layout; the files of earlier versions are recognized by their keys."""
    version = state.get("format")
    if version == FORMAT_VERSION and "kind" in state and isinstance(state.get("counters"), dict):
        return state
    if version == 1:  # BackupAndRestore's backup-N.pt before version 2: the fit call's index at the top
        counters = {"fit_index": state["fit_index"]} if "fit_index" in state else {}
        upgraded = {k: v for k, v in state.items() if k != "fit_index"}
        return {**upgraded, "format": FORMAT_VERSION, "kind": StateKind.BACKUP.value, "counters": counters}
    if version is None and {"global_step", "weights"} <= set(state):  # the Estimator's model.ckpt-<step>.pt
        return {"format": FORMAT_VERSION, "kind": StateKind.ESTIMATOR.value, "weights": state["weights"],
                "optimizer": state.get("optimizer") or {}, "sharded": False,
                "counters": {"global_step": state["global_step"]}}
    if version is None and {"model", "optimizer", "values", "samplers"} <= set(state):  # hvd.elastic's file
        return {"format": FORMAT_VERSION, "kind": StateKind.ELASTIC.value, "weights": state["model"],
                "optimizer": state["optimizer"], "sharded": False,
                "counters": {"values": state["values"], "samplers": state["samplers"]}}
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path!r} was written by a newer stratagem (training-state format {version}; this one reads up to "
            f"{FORMAT_VERSION}). Upgrade stratagem to read it. Received: format={version!r}")
    raise CheckpointError(
        f"{path!r} is not a training state stratagem wrote: it lacks the format, kind and counters of one, and is "
        "not a file of an earlier version. Use a file BackupAndRestore, an Estimator or hvd.elastic wrote, or "
        f"delete this one. Received: format={version!r}, keys={sorted(state)[:12]}")


def capture(model: Model, fit_state: FitState, callbacks: list[Callback], *, shards_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The training state of ``model`` and its ``fit_state`` now (call on every replica: it gathers RNG states).

    Under a strategy that ``ShardsVariables`` every replica first writes its shards to ``shards_dir``, which
    ``restore`` then needs.
    """
    strategy = model.distribute_strategy
    sharded = has(strategy, ShardsVariables)
    if sharded:
        if shards_dir is None:
            raise ValueError(f"{type(strategy).__name__} shards the weights, so capturing the training state needs "
                             "a folder for every replica's shards. Received: shards_dir=None")
        from stratagem.checkpoint.sharded import save_sharded  # torch's DCP takes seconds to import: only when used

        save_sharded(shards_dir, model)  # every replica writes its own shards; the folder appears complete or not at all
    all_torch_rng = _gather_rng_states(strategy)
    np_state: Any = np.random.get_state(legacy=True)  # ('MT19937', keys, pos, has_gauss, cached_gaussian)
    # Sharded: the weights and optimizer state are in the shards folder, not in the file.
    weights = {"weights": None, "optimizer": None, "sharded": True} if sharded \
        else module_state(model.module, model.optimizer)
    return {
        **weights,
        "world_size": strategy.num_replicas_in_sync,
        "position": json.dumps(fit_state.state()),
        "metrics": [[float(v) for v in metric.variables] for metric in model.metrics],
        "rng_torch": all_torch_rng,
        "rng_numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                      "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "rng_python": json.dumps(random.getstate()),
        "callbacks": json.dumps({_callback_key(i, cb): cb.get_state() for i, cb in enumerate(callbacks)
                                 if hasattr(cb, "get_state")}),
        "strategy": strategy.capture_remote_state() if has(strategy, HoldsRemoteState) else None,
    }


def _gather_rng_states(strategy: Strategy) -> torch.Tensor:
    """Every replica's torch RNG state, one row each, in ONE all-reduce (the states have one size)."""
    mine = torch.get_rng_state().to(torch.int64)
    rows = torch.zeros((strategy.num_replicas_in_sync, mine.numel()), dtype=torch.int64)
    rows[strategy.replica_id_in_sync_group] = mine  # zeros elsewhere: the sum is the stack of every row
    return strategy.reduce("sum", rows.to(strategy.device), axis=None).cpu()


def restore(model: Model, fit_state: FitState, callbacks: list[Callback], state: dict[str, Any], *,
            shards_dir: str | os.PathLike[str] | None = None) -> None:
    """Puts ``model``, its optimizer, ``fit_state``, RNGs and callbacks back as captured.

    Sharded weights and optimizer state come from ``shards_dir``, resharded onto this job's replicas.
    """
    strategy = model.distribute_strategy
    if has(strategy, HoldsRemoteState):
        strategy.restore_remote_state(state.get("strategy"))
    if state.get("sharded"):
        if shards_dir is None:
            raise ValueError("This training state was captured with sharded weights, so restoring it needs the folder "
                             "of their shards. Received: shards_dir=None")
        from stratagem.checkpoint.sharded import load_sharded

        load_sharded(shards_dir, model)  # a collective: every replica reads the pieces its shards cover
    else:
        load_module_state(model.module, model.optimizer, state)
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


def check_fits(model: Model, state: dict[str, Any], path: str) -> None:
    """Raises ``CheckpointError`` unless ``state`` is a whole training state of ``model``; changes nothing.

    Checked before ``restore`` so that a backup of another model leaves the model as it was, not half-loaded.
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
    own = model.optimizer.state_dict() if model.optimizer is not None else {}
    own_groups = [len(group["params"]) for group in own.get("param_groups", [])]
    if absent or extra or reshaped or groups != own_groups:
        raise CheckpointError(
            f"Backup {path!r} holds the training state of another model: missing weights {absent[:5]}, unexpected "
            f"weights {extra[:5]}, other shapes {reshaped[:5]}, optimizer parameter groups {groups} vs {own_groups}. "
            "Use a separate backup_dir for each model.")


def _callback_key(index: int, callback: Callback) -> str:
    return f"{index}:{type(callback).__name__}"


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value
