"""Object checkpoints as ``tf.train`` keeps them: ``Checkpoint``, ``CheckpointManager``, ``latest_checkpoint``.

A ``Checkpoint`` saves named objects (Keras and stratagem models, optimizers, metrics, variables, torch modules,
dataset iterators, nested checkpoints) in one ``<prefix>.ckpt`` file through ``checkpoint.io`` (atomic; loading runs
no code), and a folder's text index ``checkpoint`` names the latest one, as TF's does. Replicas hold the same
values, so only the chief writes and a checkpoint restores under any strategy and replica count; ``save`` and
``write`` are collectives, as TF's are: every replica calls them, and they return once the file is complete. Also
re-exported here: the ``tf.train.Example`` messages (``data.example_proto``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from stratagem.checkpoint import io as checkpoint_io
from stratagem.data.example_proto import (
    BytesList, Example, Feature, FeatureList, FeatureLists, Features, FloatList, Int64List, SequenceExample,
)
from stratagem.distribute import context
from stratagem.distribute.capabilities import SchedulesSteps, has
from stratagem.errors import CheckpointError

__all__ = ["BytesList", "Checkpoint", "CheckpointLoadStatus", "CheckpointManager", "Example", "Feature", "FeatureList",
           "FeatureLists", "Features", "FloatList", "Int64List", "SequenceExample", "latest_checkpoint"]

SUFFIX = ".ckpt"  # the one file behind a checkpoint prefix (TF writes <prefix>.index and <prefix>.data-*)
INDEX_FILE = "checkpoint"  # TF's name for the index of a checkpoint folder
_FORMAT = "stratagem.train.Checkpoint/1"


class Checkpoint:
    """Saves and restores the state of the objects given as keyword arguments (``tf.train.Checkpoint``).

    Objects may also be added as attributes later (``ckpt.step = tf.Variable(0)``). ``save_counter`` counts the
    calls to ``save``.

    Args:
        root: Optional object whose state is saved under the name ``root``.
        **kwargs: Named objects to track: Keras models, layers, optimizers, metrics and variables, ``tf.Variable``,
            ``stratagem.Model``, torch modules and optimizers, objects with ``get_state()``/``set_state()`` (dataset
            iterators), ``Checkpoint``.

    Raises:
        TypeError: If an object is of a kind whose state cannot be saved.

    Example:
        >>> ckpt = Checkpoint(model=model, optimizer=optimizer)  # doctest: +SKIP
        >>> path = ckpt.save("/tmp/ckpts/ckpt")  # "/tmp/ckpts/ckpt-1"  # doctest: +SKIP
        >>> ckpt.restore(latest_checkpoint("/tmp/ckpts")).assert_consumed()  # doctest: +SKIP
    """

    _objects: dict[str, Any]
    save_counter: torch.Tensor

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        object.__setattr__(self, "_objects", {})
        object.__setattr__(self, "save_counter", torch.tensor(0, dtype=torch.int64))
        if root is not None:
            self.root = root
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or name == "save_counter":
            object.__setattr__(self, name, value)
            return
        _kind(value, name)  # refuses what cannot be saved, now rather than at save time
        self._objects[name] = value
        object.__setattr__(self, name, value)

    def save(self, file_prefix: str, options: Any = None) -> str:
        """Writes ``<file_prefix>-<n>`` (n: the new ``save_counter``), names it in the folder's index; returns it."""
        self.save_counter += 1
        path = f"{os.fspath(file_prefix)}-{int(self.save_counter)}"
        return self._write(path, index=lambda: _write_index(os.path.dirname(path) or ".", [path]))

    def write(self, file_prefix: str, options: Any = None) -> str:
        """Writes the checkpoint at ``file_prefix`` exactly (no counter, no index file); returns it."""
        return self._write(os.fspath(file_prefix), index=None)

    def restore(self, save_path: str | None, options: Any = None) -> CheckpointLoadStatus:
        """Loads the objects' values from ``save_path`` (a prefix from ``save``/``write``/``latest_checkpoint``).

        ``save_path=None`` (no checkpoint yet) restores nothing, as in TF. Values are assigned at once; the returned
        status says what matched.

        Raises:
            CheckpointError: If the file is missing, unreadable, unsafe, or a value's shape differs.
        """
        status = CheckpointLoadStatus()
        if save_path is None:
            return status
        path = _data_file(os.fspath(save_path))
        state = checkpoint_io.load_state(path)
        if state.get("format") != _FORMAT:
            raise CheckpointError(f"{path!r} was not written by tf.train.Checkpoint (stratagem.train). "
                                  f"Received: format={state.get('format')!r}")
        if "save_counter" in state:
            self.save_counter = torch.as_tensor(state["save_counter"], dtype=torch.int64).clone()
        _restore_objects(self._objects, state["objects"], json.loads(state["kinds"]), status, prefix="")
        return status

    def read(self, save_path: str, options: Any = None) -> CheckpointLoadStatus:
        """``restore`` for a checkpoint made by ``write``."""
        return self.restore(save_path, options)

    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(values, kinds) of every tracked object, nested checkpoints included."""
        values: dict[str, Any] = {}
        kinds: dict[str, Any] = {}
        for name, value in self._objects.items():
            kind = _kind(value, name)
            if kind == "checkpoint":
                values[name], kinds[name] = value._state()
            else:
                values[name], kinds[name] = _ADAPTERS[kind][0](value), kind
        return values, kinds

    def _write(self, path: str, *, index: Callable[[], None] | None) -> str:
        values, kinds = self._state()
        state = {"format": _FORMAT, "save_counter": self.save_counter.clone(), "kinds": json.dumps(kinds),
                 "objects": values}

        def write() -> None:
            checkpoint_io.save_state(path + SUFFIX, state)
            if index is not None:
                index()

        _on_chief(write, what=f"checkpoint {path!r}")
        return path


class CheckpointLoadStatus:
    """What a ``restore`` matched (``tf.train.Checkpoint.restore``'s status).

    Values are assigned when ``restore`` runs, so the ``assert_*`` methods only check.
    """

    def __init__(self) -> None:
        self.unused: list[str] = []  # saved, but no object here took it
        self.unmatched: list[str] = []  # an object (or a value of it) here found nothing saved
        self.matched = 0

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Raises ``AssertionError`` unless every saved value was restored and every object found its values."""
        if self.unused or self.unmatched:
            raise AssertionError(
                "The checkpoint and the objects do not match one to one: saved values no object took "
                f"{self.unused[:10]}, objects or values with nothing saved {self.unmatched[:10]}. Restore into the "
                "same objects that were saved, or call expect_partial() if a partial restore is intended.")
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Raises ``AssertionError`` if an object of this checkpoint found nothing saved for it."""
        if self.unmatched:
            raise AssertionError(f"Objects with nothing saved in the checkpoint: {self.unmatched[:10]}")
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        """Raises ``AssertionError`` if nothing at all was restored."""
        if not self.matched:
            raise AssertionError("Nothing was restored: no object of this checkpoint matched a saved value.")
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Marks a partial restore as intended (nothing is warned about here either way)."""
        return self


class CheckpointManager:
    """Numbered checkpoints in one folder, keeping the newest ``max_to_keep`` (``tf.train.CheckpointManager``).

    Checkpoints listed in the folder's index file by an earlier run are taken over, so a restarted job continues the
    numbering and the clean-up.

    Args:
        checkpoint: The ``Checkpoint`` to save.
        directory: The folder of the checkpoints and their index file.
        max_to_keep: How many checkpoints to keep (None: all).
        keep_checkpoint_every_n_hours: Also keep one checkpoint per this many hours.
        checkpoint_name: Prefix of the file names (``ckpt`` -> ``ckpt-1``).
        step_counter: With ``checkpoint_interval``: a variable or tensor holding the step.
        checkpoint_interval: Save only when the step advanced this much since the last save.
        init_fn: Called by ``restore_or_initialize`` when there is no checkpoint.

    Example:
        >>> manager = CheckpointManager(ckpt, "/tmp/ckpts", max_to_keep=3)  # doctest: +SKIP
        >>> manager.restore_or_initialize()  # doctest: +SKIP
        >>> manager.save()  # "/tmp/ckpts/ckpt-1"  # doctest: +SKIP
    """

    def __init__(self, checkpoint: Checkpoint, directory: str, max_to_keep: int | None,
                 keep_checkpoint_every_n_hours: float | None = None, checkpoint_name: str = "ckpt",
                 step_counter: Any = None, checkpoint_interval: int | None = None,
                 init_fn: Callable[[], Any] | None = None) -> None:
        if max_to_keep is not None and max_to_keep <= 0:
            raise ValueError(f"max_to_keep must be positive or None. Received: max_to_keep={max_to_keep}")
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("checkpoint_interval needs a step_counter to measure it against. "
                             f"Received: checkpoint_interval={checkpoint_interval}, step_counter=None")
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._keep_every_s = None if keep_checkpoint_every_n_hours is None else keep_checkpoint_every_n_hours * 3600
        self._prefix = os.path.join(self._directory, checkpoint_name)
        self._step_counter = step_counter
        self._interval = checkpoint_interval
        self._init_fn = init_fn
        self._last_step: int | None = None
        self._last_preserved = time.time()
        self._kept: list[str] = [p for p in _read_index(self._directory)[1] if os.path.exists(p + SUFFIX)]

    @property
    def directory(self) -> str:
        """The folder of the checkpoints."""
        return self._directory

    @property
    def checkpoint(self) -> Checkpoint:
        """The ``Checkpoint`` this manager saves."""
        return self._checkpoint

    @property
    def checkpoints(self) -> list[str]:
        """The kept checkpoints' paths, oldest first."""
        return list(self._kept)

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest kept checkpoint's path, or None."""
        return self._kept[-1] if self._kept else None

    @property
    def checkpoint_interval(self) -> int | None:
        """The step interval given at construction."""
        return self._interval

    def save(self, checkpoint_number: int | None = None, check_interval: bool = True, options: Any = None) -> str | None:
        """Saves ``<directory>/<checkpoint_name>-<n>`` and deletes checkpoints beyond ``max_to_keep``.

        ``n`` is ``checkpoint_number`` if given, else the checkpoint's ``save_counter`` after it counts this save.
        Returns the path, or None when ``checkpoint_interval`` skips it.
        """
        if self._interval is not None and check_interval:
            step = int(torch.as_tensor(getattr(self._step_counter, "value", self._step_counter)))
            if self._last_step is not None and step - self._last_step < self._interval:
                return None
            self._last_step = step
        self._checkpoint.save_counter += 1
        number = int(self._checkpoint.save_counter) if checkpoint_number is None else int(checkpoint_number)
        path = f"{self._prefix}-{number}"
        kept = [p for p in self._kept if p != path] + [path]
        deleted: list[str] = []
        if self._max_to_keep is not None:
            while len(kept) > self._max_to_keep:
                oldest = kept.pop(0)
                if self._keep_every_s is not None and _mtime(oldest) - self._last_preserved >= self._keep_every_s:
                    self._last_preserved = _mtime(oldest)  # preserved for good, and no longer managed
                    continue
                deleted.append(oldest)

        def index_and_sweep() -> None:
            _write_index(self._directory, kept)  # the index first: it never names a deleted checkpoint
            for old in deleted:
                if os.path.exists(old + SUFFIX):
                    os.unlink(old + SUFFIX)

        self._checkpoint._write(path, index=index_and_sweep)
        self._kept = kept
        return path

    def restore_or_initialize(self) -> str | None:
        """Restores the latest checkpoint and returns its path; without one, calls ``init_fn`` and returns None."""
        if self.latest_checkpoint is not None:
            self._checkpoint.restore(self.latest_checkpoint)
            return self.latest_checkpoint
        if self._init_fn is not None:
            self._init_fn()
        return None


def latest_checkpoint(checkpoint_dir: str | os.PathLike[str], latest_filename: str | None = None) -> str | None:
    """The latest checkpoint of ``checkpoint_dir`` (``tf.train.latest_checkpoint``), or None.

    With an index file (``checkpoint``, written by ``Checkpoint.save`` and ``CheckpointManager``) the path it names,
    if that checkpoint still exists, as in TF. Without one, the newest checkpoint file in the folder
    (``ModelCheckpoint`` and ``save_weights`` files, which ``model.load_weights`` reads):
    ``stratagem.checkpoint.latest_checkpoint``.
    """
    folder = os.fspath(checkpoint_dir)
    index = os.path.join(folder, latest_filename or INDEX_FILE)
    if not os.path.isfile(index):
        return checkpoint_io.latest_checkpoint(folder)
    latest, _ = _read_index(folder, latest_filename)
    if latest is None or not (os.path.exists(latest + SUFFIX) or os.path.exists(latest)):
        return None
    return latest


# ---- the index file (TF's CheckpointState as text) ---------------------------------------------------------------

_INDEX_LINE = re.compile(r'^\s*(\w+)\s*:\s*"((?:[^"\\]|\\.)*)"\s*$')


def _read_index(folder: str, name: str | None = None) -> tuple[str | None, list[str]]:
    """(latest path, all paths) named by the index file of ``folder``; relative paths are taken in ``folder``."""
    index = Path(folder, name or INDEX_FILE)
    if not index.is_file():
        return None, []
    latest: str | None = None
    paths: list[str] = []
    for line in index.read_text(encoding="utf-8").splitlines():
        match = _INDEX_LINE.match(line)
        if match is None:
            continue  # timestamps, and anything TF may add
        value = match.group(2).encode().decode("unicode_escape")
        value = value if os.path.isabs(value) else os.path.join(folder, value)
        if match.group(1) == "model_checkpoint_path":
            latest = value
        elif match.group(1) == "all_model_checkpoint_paths":
            paths.append(value)
    return latest, paths


def _write_index(folder: str, paths: list[str]) -> None:
    """Writes the index file naming ``paths`` (the last is the latest), relative to ``folder`` where inside it."""

    def relative(path: str) -> str:
        inside = os.path.abspath(os.path.dirname(path)) == os.path.abspath(folder)
        return json.dumps(os.path.basename(path) if inside else path)

    now = time.time()
    lines = [f"model_checkpoint_path: {relative(paths[-1])}"]
    lines += [f"all_model_checkpoint_paths: {relative(p)}" for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {_mtime(p) or now}" for p in paths]
    lines.append(f"last_preserved_timestamp: {now}")
    text = "\n".join(lines) + "\n"
    checkpoint_io.atomic_write(os.path.join(folder, INDEX_FILE), lambda tmp: Path(tmp).write_text(text, "utf-8"))


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path + SUFFIX)
    except OSError:
        return 0.0


def _data_file(path: str) -> str:
    if os.path.isfile(path + SUFFIX):
        return path + SUFFIX
    if os.path.isfile(path):
        return path
    raise CheckpointError(f"No checkpoint at {path!r} (looked for {path + SUFFIX!r}). Pass a path returned by "
                          f"save(), write() or latest_checkpoint(). Received: save_path={path!r}")


def _on_chief(write: Callable[[], None], *, what: str) -> None:
    """Runs ``write`` on the chief only; under several synchronous replicas every replica waits for it."""
    strategy = context.distributed_strategy() or context.get_strategy()
    syncing = strategy.num_replicas_in_sync > 1 and not has(strategy, SchedulesSteps)
    error: BaseException | None = None
    if strategy.is_chief:
        # NOTE: the replicas hold the same values, so one copy is the checkpoint; two writers would race.
        try:
            write()
        except BaseException as err:  # re-raised below, after the others learned of it
            if not syncing:
                raise
            error = err
    if not syncing:
        return
    # A barrier that also carries the chief's outcome, so no replica reads a half-written checkpoint and no replica
    # waits forever for a chief that failed.
    failed = strategy.reduce("max", torch.tensor(float(error is not None), device=strategy.device), axis=None)
    if error is not None:
        raise error
    if float(failed):
        raise CheckpointError(f"The chief failed to write {what}; see its error. Nothing new was written.")


# ---- what each kind of object saves ------------------------------------------------------------------------------

def _keras() -> Any | None:
    return sys.modules.get("keras")


def _kind(value: Any, name: str) -> str:
    keras = _keras()
    if isinstance(value, Checkpoint):
        return "checkpoint"
    if keras is not None:
        if isinstance(value, keras.optimizers.Optimizer):
            return "keras_optimizer"
        if isinstance(value, keras.metrics.Metric):
            return "keras_metric"
        if isinstance(value, keras.Layer):
            return "keras_layer"
        if isinstance(value, keras.Variable):
            return "variable"
    if hasattr(value, "distribute_strategy") and isinstance(getattr(value, "module", None), torch.nn.Module):
        return "stratagem_model"
    if isinstance(value, torch.nn.Module):
        return "torch_module"
    if isinstance(value, torch.Tensor):
        return "tensor"
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return "torch_optimizer"  # torch optimizers and stratagem's StrategyOptimizer (a strategy's update step)
    if callable(getattr(value, "assign", None)) and isinstance(getattr(value, "value", None), torch.Tensor):
        return "variable"  # tf.Variable
    if callable(getattr(value, "get_state", None)) and callable(getattr(value, "set_state", None)):
        return "iterator"
    raise TypeError(
        f"tf.train.Checkpoint cannot save {name}={type(value).__name__}: it saves Keras models, layers, optimizers, "
        "metrics and variables, tf.Variable, stratagem.Model, torch modules, optimizers and tensors, dataset "
        f"iterators and other Checkpoints. Received: {name} of type {type(value).__name__}")


def _tensors_of(variables: list[Any]) -> list[torch.Tensor]:
    return [torch.as_tensor(v.value).detach().cpu().clone() for v in variables]


def _module_of(module: torch.nn.Module) -> torch.nn.Module:
    inner = getattr(module, "module", None)  # a DDP wrapper: the user's module, so any strategy restores it
    return inner if isinstance(module, torch.nn.parallel.DistributedDataParallel) and inner is not None else module


def _save_stratagem_model(model: Any) -> dict[str, Any]:
    optimizer: Any = getattr(model, "optimizer", None)
    return {"weights": {k: v.detach().cpu().clone() for k, v in _module_of(model.module).state_dict().items()},
            "optimizer": optimizer.state_dict() if callable(getattr(optimizer, "state_dict", None)) else None}


_ADAPTERS: dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any, CheckpointLoadStatus, str], None]]] = {}


def _restore_objects(objects: dict[str, Any], saved: dict[str, Any], kinds: dict[str, Any],
                     status: CheckpointLoadStatus, *, prefix: str) -> None:
    for name in saved:
        if name not in objects:
            status.unused.append(prefix + name)
    _build_keras_optimizers(objects, saved)
    for name, value in objects.items():
        where = prefix + name
        if name not in saved:
            status.unmatched.append(where)
            continue
        kind = _kind(value, where)
        if kind == "checkpoint":
            if not isinstance(kinds.get(name), dict):
                raise CheckpointError(f"{where!r} is a Checkpoint here but was saved as {kinds.get(name)!r}.")
            _restore_objects(value._objects, saved[name], kinds[name], status, prefix=where + "/")
            continue
        if kinds.get(name) != kind:
            raise CheckpointError(f"{where!r} is a {kind} here but was saved as a {kinds.get(name)}. Restore into "
                                  f"the same kind of object. Received: saved kind={kinds.get(name)!r}")
        _ADAPTERS[kind][1](value, saved[name], status, where)
        status.matched += 1


def _assign_all(variables: list[Any], values: list[torch.Tensor], status: CheckpointLoadStatus, where: str) -> None:
    if values and not variables:
        # NOTE: TF would hold the values until the weights exist; assigned now, they would be lost silently.
        raise CheckpointError(
            f"Cannot restore {where!r}: it has no weights yet (a Keras model builds them on its first call, or from "
            f"keras.Input), and the checkpoint holds {len(values)} values for it. Build it first: call it once on a "
            "batch, or start a Sequential with keras.Input(shape). Received: 0 weights")
    if len(values) != len(variables):
        status.unmatched.extend(f"{where}[{i}]" for i in range(len(values), len(variables)))
        status.unused.extend(f"{where}[{i}]" for i in range(len(variables), len(values)))
    for i, (variable, value) in enumerate(zip(variables, values)):
        _check_shape(f"{where}[{i}] ({getattr(variable, 'path', '')})", torch.as_tensor(variable.value).shape, value)
        variable.assign(value)


def _check_shape(where: str, shape: Any, value: torch.Tensor) -> None:
    if tuple(shape) != tuple(value.shape):
        raise CheckpointError(f"Cannot restore {where}: the checkpoint holds shape {tuple(value.shape)}, the object "
                              f"has {tuple(shape)}. Build the same model as the one saved. Received: "
                              f"saved={tuple(value.shape)}, expected={tuple(shape)}")


def _build_keras_optimizers(objects: dict[str, Any], saved: dict[str, Any]) -> None:
    """Builds each unbuilt Keras optimizer among ``objects`` whose saved state holds slots.

    NOTE: Keras builds an optimizer's slots (momentum, Adam's moments) at its first
    ``apply_gradients``, and TF defers their restore until then. Here values are assigned at once, so the optimizer
    is built now, over what it will train: the trainable variables of the Keras models saved beside it in this
    checkpoint, in their order, as TF's tutorials pair ``Checkpoint(optimizer=optimizer, model=model)``.
    """
    keras = _keras()
    if keras is None:
        return
    layers = [v for v in objects.values() if isinstance(v, keras.Layer)]
    for name, optimizer in objects.items():
        if not isinstance(optimizer, keras.optimizers.Optimizer) or optimizer.built or name not in saved:
            continue
        if len(saved[name]) <= len(optimizer.variables):
            continue  # saved unbuilt too: nothing more to receive
        if not layers:
            raise CheckpointError(
                f"Cannot restore the Keras optimizer {name!r}: it has not been built yet, so its slots (momentum, "
                "Adam's moments) do not exist to receive the saved values, and no Keras model is saved beside it to "
                "build it for. Call optimizer.build(model.trainable_variables) before restoring.")
        optimizer.build([v for layer in layers for v in layer.trainable_variables])


def _restore_stratagem_model(model: Any, saved: dict[str, Any], status: CheckpointLoadStatus, where: str) -> None:
    _restore_torch_module(model.module, saved["weights"], status, where)
    optimizer: Any = getattr(model, "optimizer", None)
    if saved.get("optimizer") is not None and callable(getattr(optimizer, "load_state_dict", None)):
        optimizer.load_state_dict(saved["optimizer"])


def _restore_torch_module(module: torch.nn.Module, saved: dict[str, Any], status: CheckpointLoadStatus,
                          where: str) -> None:
    module = _module_of(module)
    own = module.state_dict()
    for key, value in saved.items():
        if key in own:
            _check_shape(f"{where}.{key}", own[key].shape, value)
    result = module.load_state_dict(saved, strict=False)
    status.unmatched.extend(f"{where}.{key}" for key in result.missing_keys)
    status.unused.extend(f"{where}.{key}" for key in result.unexpected_keys)


def _restore_tensor(tensor: torch.Tensor, value: torch.Tensor, status: CheckpointLoadStatus, where: str) -> None:
    _check_shape(where, tensor.shape, value)
    with torch.no_grad():
        tensor.copy_(value)


def _restore_variable(variable: Any, value: torch.Tensor, status: CheckpointLoadStatus, where: str) -> None:
    _check_shape(where, torch.as_tensor(variable.value).shape, value)
    variable.assign(value)


_ADAPTERS.update({
    "keras_layer": (lambda layer: _tensors_of(layer.weights),
                    lambda layer, values, status, where: _assign_all(list(layer.weights), values, status, where)),
    "keras_optimizer": (lambda optimizer: _tensors_of(optimizer.variables),
                        lambda opt, values, status, where: _assign_all(list(opt.variables), values, status, where)),
    "keras_metric": (lambda metric: _tensors_of(metric.variables),
                     lambda metric, values, status, where: _assign_all(list(metric.variables), values, status, where)),
    "variable": (lambda variable: torch.as_tensor(variable.value).detach().cpu().clone(), _restore_variable),
    "stratagem_model": (_save_stratagem_model, _restore_stratagem_model),
    "torch_module": (lambda module: {k: v.detach().cpu().clone() for k, v in _module_of(module).state_dict().items()},
                     _restore_torch_module),
    "torch_optimizer": (lambda optimizer: optimizer.state_dict(),
                        lambda optimizer, saved, status, where: optimizer.load_state_dict(saved)),
    "tensor": (lambda tensor: tensor.detach().cpu().clone(), _restore_tensor),
    "iterator": (lambda iterator: json.dumps(iterator.get_state()),
                 lambda iterator, saved, status, where: iterator.set_state(json.loads(saved))),
})
