"""``BackupAndRestore``: back up the whole training state; a restarted job resumes from it.

Keras' semantics: if ``backup_dir`` holds a backup when ``fit`` starts, training continues from it (mid-epoch if
taken mid-epoch); when ``fit`` completes the backups are deleted (``delete_checkpoint=True``). Each backup records
which of the process's ``fit`` calls on that folder took it, so a restarted script skips the calls that had
completed and resumes the interrupted one. A backup is a ``checkpoint.state`` file written atomically by the chief;
the two newest are kept, and a damaged newest one, or one of another model, falls back to the one before with a
warning. Every replica must see ``backup_dir``. Under a strategy that shards the weights every replica also writes
``backup-N.shards/``, and ``backup-N.pt`` is written after it, so it marks a whole backup, restorable onto any
number of replicas.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratagem.callbacks.callback import Callback, check_path
from stratagem.checkpoint import state as training_state
from stratagem.checkpoint.io import remove_stale_temporaries
from stratagem.checkpoint.state import StateKind, shards_dir_for
from stratagem.errors import CheckpointError

if TYPE_CHECKING:  # the fit modules import the callbacks
    from stratagem.models.fit_state import FitState

_NAME = re.compile(r"^backup-(\d+)\.pt$")
_KEEP = 2
# NOTE: process state, like the RNGs: how many fits of this process completed on each backup folder.
# A restarted script repeats its fit calls in order, so this count names "the same fit" in a backup;
# a fit that raised is not counted, so calling it again resumes it, as in Keras.
_fits_completed: collections.Counter[str] = collections.Counter()


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
        self.backup_dir = Path(check_path("BackupAndRestore", "backup_dir", backup_dir))
        self.save_freq, self.delete_checkpoint = save_freq, delete_checkpoint
        self._batches = 0
        self._counter = 0
        self.restored_from: str | None = None

    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        self._batches = 0
        if self.backup_dir.exists() and not self.backup_dir.is_dir():
            raise ValueError(
                f"BackupAndRestore needs a folder for its backups, but {str(self.backup_dir)!r} is a file. Pass "
                f"the path of a folder (created if missing). Received: backup_dir={str(self.backup_dir)!r}")
        self._fit_index = _fits_completed[str(self.backup_dir.resolve())]
        if self.model.distribute_strategy.is_chief and self.backup_dir.is_dir():
            # Temporaries of backups a killed job was writing: no save of this job has begun yet.
            remove_stale_temporaries(self.backup_dir, before_ns=time.time_ns())
        self._done_before_restart = False
        backups = self._backups_newest_first()
        self._counter = max((_number(path) for path in backups), default=0)  # new backups sort after old ones
        skipped: list[str] = []
        for path in backups:
            try:
                state = training_state.read(path, kind=StateKind.BACKUP)
                training_state.check_fits(self.model, state, str(path))
            except CheckpointError as err:
                warnings.warn(f"Skipping a damaged backup or one of another model; trying the previous one: {err}",
                              stacklevel=2)
                skipped.append(str(err))
                continue
            fit_index = int(state["counters"].get("fit_index", self._fit_index))
            if fit_index < self._fit_index:
                return  # an earlier fit's backup, about to be deleted: this fit starts fresh
            if fit_index > self._fit_index:
                self._fit.finish()  # this fit had completed before a restart: the later fit resumes
                self._done_before_restart = True
                return
            training_state.restore(self.model, self._fit, self._others(), state, shards_dir=shards_dir_for(path))
            self.restored_from = str(path)
            return
        if skipped:
            raise CheckpointError(
                f"None of the {len(skipped)} backups in {str(self.backup_dir)!r} can be restored into this model, "
                "and training from scratch would overwrite them. Delete them if they belong to another job, or "
                "pass another backup_dir. Reasons: " + " | ".join(skipped))

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self._batches += 1
        if isinstance(self.save_freq, int) and self._batches % self.save_freq == 0:
            self._backup()

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if self.save_freq == "epoch":
            self._backup()

    def on_train_end(self, logs: dict[str, float] | None = None) -> None:
        _fits_completed[str(self.backup_dir.resolve())] += 1
        # As Keras 3: training ended, so the backups are deleted and a later fit starts fresh
        # (not those of the later fit that a restarted script is on its way to).
        if self.delete_checkpoint and not self._done_before_restart:
            self._delete_all()

    def _backup(self) -> None:
        self._counter += 1  # on every replica: all of them write shards under this number when sharded
        path = self.backup_dir / f"backup-{self._counter}.pt"
        state = training_state.capture(self.model, self._fit, self._others(),
                                       shards_dir=shards_dir_for(path))  # a collective: every replica calls it
        if not self.model.distribute_strategy.is_chief:
            return
        training_state.write(path, state, kind=StateKind.BACKUP, counters={"fit_index": self._fit_index})
        for old in self._backups_newest_first()[_KEEP:]:
            _remove_backup(old)

    def _delete_all(self) -> None:
        if not self.model.distribute_strategy.is_chief or not self.backup_dir.is_dir():
            return
        for path in self._backups_newest_first():
            _remove_backup(path)
        remove_stale_temporaries(self.backup_dir, before_ns=time.time_ns())
        with contextlib.suppress(OSError):  # Keras removes the folder; ours goes only if nothing else is in it
            self.backup_dir.rmdir()

    def _others(self) -> list[Any]:
        return [c for c in self._fit.callbacks if c is not self]

    @property
    def _fit(self) -> FitState:
        if self.fit_state is None:  # Model.fit hands it to every callback; a hand-made CallbackList may not
            raise ValueError("BackupAndRestore saves and restores where a fit stands, so it runs inside Model.fit "
                             "only. Received: fit_state=None")
        return self.fit_state

    def _backups_newest_first(self) -> list[Path]:
        if not self.backup_dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.backup_dir.iterdir() if (m := _NAME.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]


def _number(path: Path) -> int:
    return int(_NAME.match(path.name).group(1))  # type: ignore[union-attr]


def _remove_backup(path: Path) -> None:
    path.unlink(missing_ok=True)  # the file first: without it, the shards are no backup
    shutil.rmtree(shards_dir_for(path), ignore_errors=True)
