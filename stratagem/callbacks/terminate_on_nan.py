"""``TerminateOnNaN``: stops ``fit`` as soon as the loss becomes NaN or infinite."""

from __future__ import annotations

import math

from typing_extensions import override

from stratagem.callbacks.callback import Callback


class TerminateOnNaN(Callback):
    """Stops training at the first batch whose running loss is NaN or infinite.

    ``logs["loss"]`` is the loss over the epoch's batches so far, so one bad batch keeps it non-finite for the rest
    of the epoch, as in Keras.

    Example:
        >>> model.fit(x, y, epochs=10, callbacks=[stratagem.callbacks.TerminateOnNaN()])  # doctest: +SKIP
    """

    stops_training = "batch"  # a NaN on one replica stops them all after that step

    @override
    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(loss):
            return
        # The batch logs are this replica's; stops_training = "batch" makes the loop agree after the step, so every
        # replica stops at the same batch and none is left waiting in the next step's all-reduce.
        if self.model.distribute_strategy.is_chief:
            print(f"Batch {batch}: Invalid loss, terminating training")
        self.model.stop_training = True
