"""``ProgbarLogger``: Keras' progress bar, printed by the chief only.

On a terminal the bar redraws in place. When output is a pipe (the launcher, CI, a log file) it prints a full line a
few times per epoch instead, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from stratagem.callbacks.callback import Callback

_REDRAW_S = 0.1       # terminal: redraw at most this often
_PIPE_LINE_S = 10.0   # pipe: at most one progress line per this many seconds


class ProgbarLogger(Callback):
    """Shows ``step/steps [====>...] - ETA - loss - metrics - samples/s``.

    Args:
        verbose: 1 for a bar, 2 for one line per epoch.
        stream: Where to print; default ``sys.stdout``.
    """

    stops_training = "never"

    def __init__(self, verbose: int = 1, stream: TextIO | None = None) -> None:
        super().__init__()
        self.verbose = verbose
        self.stream = stream

    def _out(self) -> TextIO:
        return self.stream or sys.stdout

    def _active(self) -> bool:
        return self.model is not None and self.model.distribute_strategy.is_chief

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self._start = self._last_draw = time.perf_counter()
        self._seen = 0
        if self._active():
            print(f"Epoch {epoch + 1}/{self.params.get('epochs', '?')}", file=self._out(), flush=True)

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self._seen = batch + 1
        if self.verbose != 1 or not self._active():
            return
        now = time.perf_counter()
        tty = self._out().isatty()
        if now - self._last_draw < (_REDRAW_S if tty else _PIPE_LINE_S):
            return
        self._last_draw = now
        line = self._line(batch + 1, logs or {}, now, final=False)
        if tty:
            self._out().write("\r" + line)
            self._out().flush()
        else:
            print(line, file=self._out(), flush=True)

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if not self._active():
            return
        # No batch hook ran (a coordinated fit schedules steps): the epoch ran all its steps.
        seen = self._seen or int(self.params.get("steps") or 0)
        line = self._line(seen, logs or {}, time.perf_counter(), final=True)
        prefix = "\r" if self.verbose == 1 and self._out().isatty() else ""
        print(prefix + line, file=self._out(), flush=True)

    def _line(self, step: int, logs: dict[str, Any], now: float, *, final: bool) -> str:
        steps = self.params.get("steps")
        elapsed = max(now - self._start, 1e-9)
        head = f"{step}/{steps}" if steps else f"{step}"
        if steps:
            filled = int(30 * min(step, steps) / steps)
            head += " [" + "=" * max(filled - 1, 0) + (">" if filled < 30 else "=") + "." * (30 - filled) + "]"
        parts = [head]
        if final:
            parts.append(f"{elapsed:.0f}s {1000 * elapsed / max(step, 1):.0f}ms/step")
            wait = getattr(self.model, "input_wait_fraction", 0.0)
            if wait >= 0.05:  # worth a word: the input pipeline is holding training back
                parts.append(f"input wait {100 * wait:.0f}%")
        elif steps:
            parts.append(f"ETA: {elapsed / step * (steps - step):.0f}s")
        parts += [f"{key}: {_format_value(value)}" for key, value in logs.items()]
        batch_size = self.params.get("batch_size")
        if batch_size:
            samples = self.params.get("samples") or 0 if final else 0
            samples = samples or step * batch_size
            parts.append(f"{samples / elapsed:.0f} samples/s")
        return " - ".join(parts)


def _format_value(value: float | list[float]) -> str:
    """Keras' rule: four decimals, or scientific notation at 1e-3 and below (a learning rate of 1e-5).

    A metric with several values (``Precision(thresholds=[...])``) shows their mean, as Keras' bar does.
    """
    if isinstance(value, (list, tuple)):
        value = sum(value) / max(len(value), 1)
    return f"{value:.4f}" if abs(value) > 1e-3 else f"{value:.4e}"
