"""Sharded checkpoints: every replica writes and reads its own shards (``torch.distributed.checkpoint``).

For ``ShardedDataParallelStrategy``, whose state no single process holds; it works under every strategy. A
checkpoint is a folder of per-rank files plus DCP's ``.metadata``, loadable onto any number of replicas (DCP
reshards). Atomic: every rank writes into ``.<name>.partial`` and the chief renames it when all have finished, so a
folder with the final name is complete. Safe: DCP's pickled metadata and torch.save'd non-tensor items are read by
``unpickling.unpickle`` (an exact allow-list). ``BackupAndRestore``'s file-per-process state is ``state.py``'s.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from typing_extensions import override

from stratagem._torch_internals import DCP_METADATA_FILE, dcp_metadata_file
from stratagem.checkpoint.io import fsync_path, replace_folder
from stratagem.checkpoint.unpickling import refused, unpickle
from stratagem.errors import CheckpointError

if TYPE_CHECKING:  # the model module imports the checkpoints
    from stratagem.distribute.strategy import Strategy
    from stratagem.models.model import Model



class ShardedCheckpoint:
    """Saves and restores a model's weights and optimizer state, each replica its own shards.

    The sharded counterpart of ``tf.train.Checkpoint(model=..., optimizer=...)``: every replica calls
    ``save``/``restore`` at the same point (they are collectives); each writes only the shards it holds. A
    checkpoint saved by N replicas restores onto any number of replicas, under any strategy.

    Args:
        model: A compiled ``stratagem.Model``.

    Example:
        >>> checkpoint = stratagem.checkpoint.ShardedCheckpoint(model)  # doctest: +SKIP
        >>> checkpoint.save("/shared/ckpt/step-100")  # doctest: +SKIP
        >>> future = checkpoint.save("/shared/ckpt/step-200", async_save=True)  # training goes on  # doctest: +SKIP
        >>> checkpoint.restore("/shared/ckpt/step-200")  # waits for the save first  # doctest: +SKIP
    """

    def __init__(self, model: Model) -> None:
        _module_and_optimizer(model)  # raises before any save if the model is not compiled
        self._model = model
        self._pending: concurrent.futures.Future[str] | None = None
        self._group: Any = None  # the gloo group of background saves, made at the first one

    def save(self, directory: str | os.PathLike[str], *, async_save: bool = False) -> concurrent.futures.Future[str] | None:
        """Writes the checkpoint folder ``directory`` (replacing one already there); every replica calls it.

        With ``async_save``, the state is copied to host memory and written in a background thread
        (``dcp.async_save``): the returned future gives the folder once every rank has written its shards and the
        chief has renamed it into place. A later ``save`` or ``restore`` waits for it first.

        Raises:
            CheckpointError: If writing failed on some rank (from the future, when async).
        """
        self.wait()
        strategy = self._model.distribute_strategy
        target = Path(directory)
        partial = target.parent / f".{target.name}.partial"
        started = 0  # the file system's clock, as the leftovers' times are (the chief's only is used)
        if strategy.is_chief:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)  # left by a save that crashed
            partial.mkdir()
            started = partial.stat().st_mtime_ns
        _barrier(strategy)  # no rank writes into the partial folder before the chief has cleared it
        state = _state_dict(self._model)
        if not async_save:
            try:
                with _one_process_quietly():
                    dcp.save(state, checkpoint_id=partial, no_dist=not dist.is_initialized())
            except dcp.api.CheckpointException as err:
                raise CheckpointError(f"Saving the sharded checkpoint {str(target)!r} failed on some rank: "
                                      f"{str(err)[:500]}") from err
            if strategy.is_chief:
                _commit(partial, target, started_ns=started)
            _barrier(strategy)  # when save returns, every rank can read the folder
            return None
        if self._group is None and dist.is_initialized():
            # NOTE: the background thread's collectives go through their own group, so they never interleave with the
            # training step's collectives on the default group.
            self._group = dist.new_group(backend="gloo")
        with _one_process_quietly():
            written = dcp.async_save(state, checkpoint_id=partial, process_group=self._group,
                                     no_dist=not dist.is_initialized())
        self._pending = _then_commit(written, partial, target, chief=strategy.is_chief, started_ns=started)
        return self._pending

    def restore(self, directory: str | os.PathLike[str]) -> None:
        """Loads a checkpoint written by ``save``, onto this job's replicas (any number): a collective.

        Raises:
            CheckpointError: If the folder is missing or incomplete, holds objects that could run code, or does not
                fit the model.
        """
        self.wait()
        load_sharded(directory, self._model)

    def wait(self) -> None:
        """Blocks until the last asynchronous save is written (re-raising its error)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


def save_sharded(directory: str | os.PathLike[str], model: Model) -> None:
    """Writes ``model``'s weights and optimizer state to the folder ``directory``, each replica its shards."""
    ShardedCheckpoint(model).save(directory)


def load_sharded(directory: str | os.PathLike[str], model: Model) -> None:
    """Loads what ``save_sharded`` wrote into ``model`` and its optimizer, resharded onto this job: a collective.

    Raises:
        CheckpointError: If the folder is missing or incomplete, unsafe, or does not fit the model.
    """
    folder = Path(directory)
    if not (folder / DCP_METADATA_FILE).is_file():
        raise CheckpointError(
            f"No complete sharded checkpoint at {str(folder)!r} (a folder with DCP's {DCP_METADATA_FILE}): it was "
            f"never written, or its save did not finish. Use an older checkpoint. Received: directory={str(folder)!r}")
    _read_metadata(folder / DCP_METADATA_FILE)  # refused here, before DCP (which logs and retries), if unsafe
    module, optimizer = _module_and_optimizer(model)
    model_state, optimizer_state = get_state_dict(module, optimizer)  # this job's shards, filled in place
    state: dict[str, Any] = {"model": model_state, "optimizer": optimizer_state}
    try:
        with _one_process_quietly():
            dcp.load(state, storage_reader=_SafeReader(folder), planner=_SafeLoadPlanner(),
                     no_dist=not dist.is_initialized())
        set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    except (RuntimeError, ValueError, KeyError, CheckpointError, dcp.api.CheckpointException) as err:
        raise CheckpointError(
            f"Cannot load the sharded checkpoint {str(folder)!r}: it is damaged, holds objects that could run code, or "
            f"was saved from another model or optimizer. Received: {type(err).__name__}: {str(err)[:300]}"
        ) from err


def _state_dict(model: Model) -> dict[str, Any]:
    """The model's and optimizer's state keyed by parameter name (not id), so it reshards onto any job."""
    module, optimizer = _module_and_optimizer(model)
    # NOTE: get_state_dict takes one zero-gradient step with lr 0 when the optimizer has neither state nor gradients
    # (before its first step), and the Keras rules count that step in their param_groups. Put the counters back in
    # both the optimizer and what is saved.
    groups: list[dict[str, Any]] = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    model_state, optimizer_state = get_state_dict(module, optimizer)
    saved_groups = cast("list[dict[str, Any]]", optimizer_state["param_groups"])
    for group, saved_group, before in zip(optimizer.param_groups, saved_groups, groups):
        group.update(before)
        saved_group.update(before)
    return {"model": model_state, "optimizer": optimizer_state}


def _module_and_optimizer(model: Model) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """What DCP saves and loads: the model's module and its torch optimizer."""
    optimizer = model.optimizer.torch_optimizer if model.optimizer is not None else None
    if optimizer is None:
        raise ValueError("ShardedCheckpoint saves the optimizer state too: call model.compile() first. "
                         "Received: a model that is not compiled")
    return model.module, optimizer


@contextlib.contextmanager
def _one_process_quietly() -> Iterator[None]:
    """Silences DCP's warning that there is no process group: here that is a job of one replica, not a mistake."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _barrier(strategy: Strategy) -> None:
    """Waits for every replica, through the one collective every strategy has (with its timeout)."""
    if strategy.num_replicas_in_sync > 1:
        strategy.reduce("sum", torch.zeros(1, device=strategy.device), axis=None)


def _commit(partial: Path, target: Path, *, started_ns: int) -> None:
    """Renames the finished ``partial`` folder to ``target`` (the checkpoint now exists); sweeps older partials."""
    for path in partial.iterdir():  # DCP's writer fsyncs its data files; make sure of every file and the folder
        fsync_path(path)
    fsync_path(partial)
    replace_folder(partial, target, started_ns=started_ns)


def _then_commit(written: Any, partial: Path, target: Path, *, chief: bool,
                 started_ns: int) -> concurrent.futures.Future[str]:
    """A future that completes once ``written`` has and the chief has renamed ``partial`` into place."""
    done: concurrent.futures.Future[str] = concurrent.futures.Future()

    def finish(future: Any) -> None:
        try:
            future.result()
            if chief:
                _commit(partial, target, started_ns=started_ns)
            done.set_result(str(target))
        except BaseException as err:  # handed to whoever waits on the future
            done.set_exception(CheckpointError(f"Saving the sharded checkpoint {str(target)!r} failed: {err}"))

    written.add_done_callback(finish)
    return done


class _SafeReader(dcp.FileSystemReader):
    """DCP's file reader with its metadata read by ``unpickling.unpickle`` (DCP's own uses ``pickle.load``)."""

    @override
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = _read_metadata(Path(self.path) / dcp_metadata_file(kwargs.get("rank")))
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()  # older checkpoints have none
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


def _read_metadata(path: Path) -> Metadata:
    """DCP's metadata file, read without running code from it."""
    with open(path, "rb") as file:
        metadata = unpickle(file, path=str(path))
    if not isinstance(metadata, Metadata):
        raise refused(str(path), TypeError(f"it holds a {type(metadata).__name__}, not DCP metadata"))
    return metadata


class _SafeLoadPlanner(dcp.DefaultLoadPlanner):
    """DCP's load planner, with non-tensor items (torch.save'd bytes) read by ``unpickling.unpickle``."""

    @override
    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        plain = unpickle(value.read(), path=f"an item of the sharded checkpoint ({read_item.dest_index.fqn})")
        # DCP's own load_bytes places the value but unpickles without weights_only: hand it bytes written here from
        # the plain value, never the file's.
        written = io.BytesIO()
        torch.save(plain, written)
        written.seek(0)
        super().load_bytes(read_item, written)
