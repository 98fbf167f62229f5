"""``BackupAndRestore``: back up the whole training state; a restarted job resumes from it.

Keras' semantics: on ``fit`` start, if ``backup_dir`` holds a backup, training
continues from it (mid-epoch if it was taken mid-epoch); when ``fit``
completes, the backup is deleted (``delete_checkpoint=True``), so a later run
starts fresh. One refinement: at the end of ``fit`` a final backup marked
*completed* replaces the others, so a worker killed after training but before
its process exits costs nothing: the launcher's restart
(``STRATAGEM_RESTART_COUNT`` > 0) restores the final state and skips training,
while any fresh run deletes it and starts over, as in Keras. The backup is written by the chief, atomically; the two newest
are kept, and a damaged newest one falls back to the one before with a
warning. Every replica must see ``backup_dir`` (a shared folder across hosts).
Under a strategy that shards the weights (``ShardedDataParallelStrategy``)
every replica also writes its shards to ``backup-N.shards/`` beside
``backup-N.pt``; the file is written after the folder is complete, so it marks
a whole backup, and the backup restores onto any number of replicas.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

from stratagem.callbacks.callback import Callback
from stratagem.checkpoint import state as training_state
from stratagem.checkpoint.io import load_state, save_state
from stratagem.errors import CheckpointError
from stratagem._launched import restart_count

_NAME = re.compile(r"^backup-(\d+)\.pt$")
_KEEP = 2


class BackupAndRestore(Callback):
    """Backs up training every epoch or every N batches, and restores it on restart.

    Args:
        backup_dir: Folder for the backups (shared by every worker).
        save_freq: ``"epoch"``, or an int: back up every that many batches.
        delete_checkpoint: Delete the backups when ``fit`` completes.

    Example:
        >>> model.fit(x, y, epochs=10,
        ...           callbacks=[BackupAndRestore("/shared/backup", save_freq=100)])  # doctest: +SKIP
    """

    stops_training = "never"

    def __init__(self, backup_dir: str | os.PathLike[str], save_freq: str | int = "epoch", delete_checkpoint: bool = True) -> None:
        super().__init__()
        if save_freq != "epoch" and (not isinstance(save_freq, int) or save_freq <= 0):
            raise ValueError(f"save_freq must be 'epoch' or a positive int. Received: save_freq={save_freq!r}")
        self.backup_dir = Path(backup_dir)
        self.save_freq, self.delete_checkpoint = save_freq, delete_checkpoint
        self._batches = 0
        self._counter = 0
        self.restored_from: str | None = None

    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        self._batches = 0
        for path in self._backups_newest_first():
            try:
                state = load_state(path)
            except CheckpointError as err:
                warnings.warn(f"Skipping a damaged backup and trying the previous one: {err}", stacklevel=2)
                continue
            if state.get("completed") and not restart_count():  # not restarted by `stratagem run --max-restarts`
                self._delete_all()  # a finished job run again: start fresh, as Keras does
                return
            training_state.restore(self.model, self.fit_state, self._others(), state, shards_dir=_shards_dir(path))
            if state.get("completed"):  # the same job, restarted after its training had finished
                self.fit_state.finish()
            self._counter = int(_NAME.match(path.name).group(1))  # type: ignore[union-attr]
            self.restored_from = str(path)
            return

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self._batches += 1
        if isinstance(self.save_freq, int) and self._batches % self.save_freq == 0:
            self._backup()

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if self.save_freq == "epoch":
            self._backup()

    def on_train_end(self, logs: dict[str, float] | None = None) -> None:
        if self.delete_checkpoint:
            self._backup(completed=True, keep=1)

    def _backup(self, *, completed: bool = False, keep: int = _KEEP) -> None:
        self._counter += 1  # on every replica: all of them write shards under this number when sharded
        path = self.backup_dir / f"backup-{self._counter}.pt"
        state = training_state.capture(self.model, self.fit_state, self._others(),
                                       shards_dir=_shards_dir(path))  # a collective: every replica calls it
        if not self.model.distribute_strategy.is_chief:
            return
        state["completed"] = completed
        save_state(path, state)
        for old in self._backups_newest_first()[keep:]:
            _remove_backup(old)

    def _delete_all(self) -> None:
        if self.model.distribute_strategy.is_chief:
            for path in self._backups_newest_first():
                _remove_backup(path)

    def _others(self) -> list[Any]:
        return [c for c in self.fit_state.callbacks if c is not self]

    def _backups_newest_first(self) -> list[Path]:
        if not self.backup_dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.backup_dir.iterdir() if (m := _NAME.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]


def _shards_dir(path: Path) -> Path:
    """Where the replicas' shards of backup ``path`` go, when the strategy shards the weights."""
    return path.with_name(f"{path.stem}.shards")


def _remove_backup(path: Path) -> None:
    path.unlink(missing_ok=True)  # the file first: without it, the shards are no backup
    shutil.rmtree(_shards_dir(path), ignore_errors=True)
