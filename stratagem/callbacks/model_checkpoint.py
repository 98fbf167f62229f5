"""``ModelCheckpoint``: saves the weights every epoch, every N batches, or on improvement.

The decision to save comes from ``logs``, which are already reduced across replicas, so every replica decides the
same. The write itself happens on the chief only (``Model.save_weights`` returns at once elsewhere, and writes
atomically). Resuming an interrupted job is ``BackupAndRestore``'s business, not this callback's.
"""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any

from typing_extensions import override

from stratagem.callbacks.callback import Callback, check_mode, check_path

_WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth")


class ModelCheckpoint(Callback):
    """Saves the model's weights at some frequency, as ``keras.callbacks.ModelCheckpoint``.

    ``filepath`` may hold ``str.format`` fields: ``{epoch}`` (1-based, as in Keras), ``{batch}`` (1-based, with an
    integer ``save_freq``) and any ``logs`` key, e.g. ``"ckpt/w.{epoch:02d}-{val_loss:.2f}.safetensors"``. Files
    ending in ``.safetensors`` hold tensors only; other names are written in torch format and read back with
    ``weights_only=True``.

    Args:
        filepath: Where to save; formatted with ``epoch``, ``batch`` and logs.
        monitor: The ``logs`` key compared when ``save_best_only`` is set.
        verbose: 1 prints a line on the chief whenever a save is decided.
        save_best_only: Save only when ``monitor`` improves on the best so far.
        save_weights_only: Keras' switch between weights and a full model.
        mode: ``"min"``, ``"max"``, or ``"auto"`` (``"max"`` if ``monitor`` contains ``"acc"`` or starts with
            ``"fmeasure"``, else ``"min"``).
        save_freq: ``"epoch"``, or an int N to save every N training batches.
        initial_value_threshold: The best value to beat before the first save.

    Raises:
        ValueError: If ``mode`` or ``save_freq`` is not one of the above.

    Example:
        >>> checkpoint = stratagem.callbacks.ModelCheckpoint(  # doctest: +SKIP
        ...     "ckpt/best.safetensors", monitor="val_loss", save_best_only=True)
        >>> model.fit(x, y, validation_data=(x_val, y_val), epochs=10, callbacks=[checkpoint])  # doctest: +SKIP
        >>> model.load_weights("ckpt/best.safetensors")  # doctest: +SKIP
    """

    stops_training = "never"

    _state_keys = ('best', '_current_epoch', '_batches_seen_since_last_saving')

    def __init__(self, filepath: str, monitor: str = "val_loss", verbose: int = 0, save_best_only: bool = False,
                 save_weights_only: bool = False, mode: str = "auto", save_freq: str | int = "epoch",
                 initial_value_threshold: float | None = None) -> None:
        super().__init__()
        check_mode("ModelCheckpoint", mode)
        if save_freq != "epoch" and (not isinstance(save_freq, int) or isinstance(save_freq, bool) or save_freq < 1):
            raise ValueError("save_freq must be 'epoch' or a positive number of batches. "
                             f"Received: save_freq={save_freq!r}")
        self.filepath = check_path("ModelCheckpoint", "filepath", filepath)
        self.monitor, self.verbose, self.mode = monitor, verbose, mode
        self.save_best_only, self.save_weights_only, self.save_freq = save_best_only, save_weights_only, save_freq
        maximize = mode == "max" or (mode == "auto" and ("acc" in monitor or monitor.startswith("fmeasure")))
        self.monitor_op = operator.gt if maximize else operator.lt
        self.best = initial_value_threshold if initial_value_threshold is not None else (
            -math.inf if maximize else math.inf)
        self._current_epoch = 0
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = 0
        self._warned_missing_monitor = False
        # A batch-level save compares the monitored value of every replica's examples.
        self._use_batch_logs(save_freq != "epoch")

    @override
    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self._current_epoch = epoch

    @override
    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if self._should_save_on_batch(batch):
            self._save_model(self._current_epoch, batch, logs)

    @override
    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if self.save_freq == "epoch":
            self._save_model(epoch, None, logs)

    def _should_save_on_batch(self, batch: int) -> bool:
        """Counts batches across epochs (Keras): a batch index that does not grow means a new epoch."""
        added = batch + 1 if batch <= self._last_batch_seen else batch - self._last_batch_seen
        self._batches_seen_since_last_saving += added
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= int(self.save_freq):
            self._batches_seen_since_last_saving = 0
            return True
        return False

    def _save_model(self, epoch: int, batch: int | None, logs: dict[str, float] | None) -> None:
        logs = logs or {}
        filepath = self._get_file_path(epoch, batch, logs)
        if not self.save_best_only:
            self._say(f"\nEpoch {epoch + 1}: saving model to {filepath}")
            self._write(filepath)
            return
        current = logs.get(self.monitor)
        if current is None:
            self._warn_missing_monitor(logs)
        elif self.monitor_op(current, self.best):
            self._say(f"\nEpoch {epoch + 1}: {self.monitor} improved from {self.best:.5f} to {current:.5f}, "
                      f"saving model to {filepath}")
            self.best = current
            self._write(filepath)
        else:
            self._say(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {self.best:.5f}")

    def _write(self, filepath: str) -> None:
        # Every replica calls this; the writes happen on the chief only, atomically. The path decides, as Keras' file
        # suffixes do: a weights file gets the weights, anything else a self-contained export folder (weights,
        # program, metadata).
        if self.save_weights_only or filepath.endswith(_WEIGHT_SUFFIXES):
            self.model.save_weights(filepath)
        else:
            self.model.save(filepath)

    def _get_file_path(self, epoch: int, batch: int | None, logs: dict[str, float]) -> str:
        fields: dict[str, Any] = dict(logs)
        if batch is not None and "batch" not in logs:
            fields["batch"] = batch + 1
        try:
            return self.filepath.format(epoch=epoch + 1, **fields)
        except KeyError as err:
            raise KeyError(
                f'Failed to format this callback filepath: "{self.filepath}". Reason: {err} is not a logs key. '
                f"Use one of epoch, batch or {sorted(logs)}. Received: filepath={self.filepath!r}"
            ) from err

    def _warn_missing_monitor(self, logs: dict[str, float]) -> None:
        if self._warned_missing_monitor or not self.model.distribute_strategy.is_chief:
            return
        self._warned_missing_monitor = True
        warnings.warn(f"Can save best model only with {self.monitor} available, skipping. "
                      f"Available logs keys: {sorted(logs)}", stacklevel=2)
