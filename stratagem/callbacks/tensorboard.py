"""``TensorBoard``: writes loss, metrics, learning rate and weight histograms as event files.

Keras' layout and tags: ``log_dir/train`` and ``log_dir/validation``, ``epoch_<key>`` scalars (``val_`` logs under
the same tags in the validation folder) and ``batch_<key>`` every ``update_freq`` batches, through torch's
``SummaryWriter``. Only the chief writes; the others take part in no collective here, except under a strategy that
shards the weights, where every replica helps gather them for the histograms.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

from typing_extensions import override

from stratagem.callbacks.callback import Callback
from stratagem.distribute.capabilities import ShardsVariables, has


class TensorBoard(Callback):
    """Logs training to TensorBoard, as ``keras.callbacks.TensorBoard``.

    Per epoch (0-based steps), the train folder gets ``epoch_loss``, ``epoch_<metric>``, ``epoch_learning_rate`` and
    ``epoch_samples_per_sec`` (over the epoch's wall time, validation included), the validation folder
    ``epoch_loss`` and ``epoch_<metric>`` from the ``val_`` logs; ``batch_*`` scalars count batches across epochs
    from 1.

    Args:
        log_dir: The folder for the ``train`` and ``validation`` event files.
        update_freq: ``"epoch"``, ``"batch"``, or an int N to also write ``batch_*`` scalars every N batches.
        histogram_freq: Every this many epochs, write a histogram of each weight (0: never).
        write_graph: Not supported (a graph needs a traced input); ``True`` gives one warning.

    Raises:
        ImportError: If the ``tensorboard`` package is not installed.
        ValueError: If ``update_freq`` or ``histogram_freq`` is invalid.

    Example:
        >>> tensorboard = stratagem.callbacks.TensorBoard(log_dir="./logs", update_freq=100)  # doctest: +SKIP
        >>> model.fit(x, y, epochs=5, validation_data=(x_val, y_val), callbacks=[tensorboard])  # doctest: +SKIP
    """

    stops_training = "never"

    def __init__(self, log_dir: str = "logs", update_freq: str | int = "epoch", histogram_freq: int = 0,
                 write_graph: bool = False) -> None:
        super().__init__()
        self._summary_writer_class = _import_summary_writer()
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and not _is_int_at_least(update_freq, 1):
            raise ValueError("update_freq must be 'epoch', 'batch' or a positive int. "
                             f"Received: update_freq={update_freq!r}")
        if not _is_int_at_least(histogram_freq, 0):
            raise ValueError(f"histogram_freq must be an int >= 0. Received: histogram_freq={histogram_freq!r}")
        self.log_dir, self.update_freq = str(log_dir), update_freq
        self.histogram_freq, self.write_graph = histogram_freq, write_graph
        self._train_writer: Any = None
        self._val_writer: Any = None
        self._global_train_batch = 0
        self._epoch_start = 0.0
        self._use_batch_logs(update_freq != "epoch")  # batch points cover every replica, as in Keras

    @override
    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        self._global_train_batch = 0
        if not self._writing():
            return
        if self.write_graph:
            warnings.warn("TensorBoard(write_graph=True) is not supported: a torch graph needs an example input. "
                          "No graph is written. Received: write_graph=True", stacklevel=2)
        self._train_writer = self._summary_writer_class(log_dir=os.path.join(self.log_dir, "train"))

    @override
    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self._epoch_start = time.perf_counter()

    @override
    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self._global_train_batch += 1
        if not self._writing() or self._global_train_batch % int(self.update_freq) != 0:
            return
        for name, value in (logs or {}).items():
            self._train_writer.add_scalar("batch_" + name, value, self._global_train_batch)

    @override
    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        weights = None
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            weights = self._weights()  # before the chief check: gathering sharded weights is a collective
        if not self._writing():
            return
        self._log_epoch_metrics(epoch, logs or {})
        if weights is not None:
            self._log_weights(weights, epoch)

    @override
    def on_train_end(self, logs: dict[str, float] | None = None) -> None:
        for writer in (self._train_writer, self._val_writer):
            if writer is not None:
                writer.close()  # flushes first
        self._train_writer = self._val_writer = None

    def _log_epoch_metrics(self, epoch: int, logs: dict[str, float]) -> None:
        train_logs = {key: value for key, value in logs.items() if not key.startswith("val_")}
        val_logs = {key[len("val_"):]: value for key, value in logs.items() if key.startswith("val_")}
        # A callback earlier in the list may have changed the rate already (ReduceLROnPlateau); the logs then hold the
        # rate this epoch trained with, which is the one to plot.
        train_logs.setdefault("learning_rate", float(self._optimizer.learning_rate))
        samples_per_sec = self._samples_per_sec()
        if samples_per_sec is not None:
            train_logs["samples_per_sec"] = samples_per_sec
        for name, value in train_logs.items():
            self._train_writer.add_scalar("epoch_" + name, value, epoch)
        if val_logs:
            if self._val_writer is None:  # created on first use, as in Keras
                self._val_writer = self._summary_writer_class(log_dir=os.path.join(self.log_dir, "validation"))
            for name, value in val_logs.items():
                self._val_writer.add_scalar("epoch_" + name, value, epoch)

    def _samples_per_sec(self) -> float | None:
        """Examples in one epoch over its wall time; None when the batch size is unknown."""
        batch_size, steps, samples = (self.params.get(key) for key in ("batch_size", "steps", "samples"))
        if not batch_size or not steps:
            return None
        # A full pass over arrays ends in a short batch: count the real examples then.
        full_pass = samples is not None and steps == -(-samples // batch_size)
        epoch_samples = samples if full_pass and samples is not None else steps * batch_size
        return epoch_samples / max(time.perf_counter() - self._epoch_start, 1e-9)

    def _weights(self) -> dict[str, Any]:
        """The module's whole weights: under a strategy that shards them, gathered on every replica."""
        strategy = self.model.distribute_strategy
        if has(strategy, ShardsVariables):
            return strategy.full_state_dict(self.model.module)
        return self.model.module.state_dict()

    def _log_weights(self, weights: dict[str, Any], epoch: int) -> None:
        for name, tensor in weights.items():
            if tensor.is_floating_point():
                self._train_writer.add_histogram(name.replace(".", "/") + "/histogram", tensor.detach().cpu(), epoch)


def _is_int_at_least(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _import_summary_writer() -> type:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError(
            "The TensorBoard callback writes event files through torch.utils.tensorboard, which needs the tensorboard "
            "package. Install it with `pip install tensorboard` (or `pip install stratagem[tensorboard]`). Received: "
            f"{type(err).__name__}: {err}"
        ) from err
    return SummaryWriter
