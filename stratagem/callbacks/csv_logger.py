"""``CSVLogger``: appends each epoch's ``logs`` as a row of a CSV file, on the chief only.

The format is Keras': an ``epoch`` column (0-based) first, then the logs keys sorted; when the first epoch has no
``val_`` keys, ``val_`` columns are added for every key and hold ``NA`` until validation runs.
"""

from __future__ import annotations

import collections.abc
import csv
import os
from typing import IO, Any

from typing_extensions import override

from stratagem.callbacks.callback import Callback, check_path


class CSVLogger(Callback):
    """Streams epoch results to a CSV file, as ``keras.callbacks.CSVLogger``.

    Args:
        filename: The CSV file.
        separator: The column separator.
        append: Append to an existing file (without a second header) instead of overwriting it.

    Example:
        >>> csv_logger = stratagem.callbacks.CSVLogger("training.log")  # doctest: +SKIP
        >>> model.fit(x, y, epochs=3, callbacks=[csv_logger])  # doctest: +SKIP
    """

    stops_training = "never"

    def __init__(self, filename: str, separator: str = ",", append: bool = False) -> None:
        super().__init__()
        self.sep = separator
        self.filename = check_path("CSVLogger", "filename", filename)
        self.append = append
        self.keys: list[str] | None = None
        self.append_header = True
        self.csv_file: IO[str] | None = None
        self.writer: csv.DictWriter | None = None

    @override
    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        if not self._writing():
            return
        if self.append and os.path.exists(self.filename):
            with open(self.filename) as f:
                self.append_header = not bool(len(f.readline()))
        self._close()
        # Kept open across epochs (rows are flushed one by one) and closed on train end.
        self.csv_file = open(self.filename, "a" if self.append else "w", newline="")  # noqa: SIM115
        self.writer = None
        self.keys = None

    @override
    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if not self._writing() or self.csv_file is None:
            return
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs)
            # With validation_freq > 1 the first epoch has no val_ keys: add them now so the header has them (Keras
            # does the same).
            if self.keys and not any(key.startswith("val_") for key in self.keys):
                self.keys += ["val_" + key for key in self.keys]
        if self.writer is None:
            self.writer = self._make_writer(["epoch", *self.keys])
        row: dict[str, Any] = {"epoch": epoch}
        row.update((key, _handle_value(logs.get(key, "NA"))) for key in self.keys)
        self.writer.writerow(row)
        self.csv_file.flush()

    @override
    def on_train_end(self, logs: dict[str, float] | None = None) -> None:
        self._close()
        self.writer = None

    def _make_writer(self, fieldnames: list[str]) -> csv.DictWriter:
        assert self.csv_file is not None
        writer = csv.DictWriter(self.csv_file, fieldnames=fieldnames, delimiter=self.sep)
        if self.append_header:
            writer.writeheader()
        return writer

    def _close(self) -> None:
        if self.csv_file is not None and not self.csv_file.closed:
            self.csv_file.close()


def _handle_value(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, collections.abc.Iterable) and getattr(value, "ndim", 1) != 0:
        return f"\"[{', '.join(map(str, value))}]\""
    return value
