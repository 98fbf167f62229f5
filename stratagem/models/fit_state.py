"""``FitState``: where a running ``fit`` stands, the one object checkpoints save and restore.

``fit`` hands it to every callback (``Callback.set_fit_state``), and ``BackupAndRestore`` and ``checkpoint.state``
take it as an argument: nothing reads the model's private attributes to find out where training is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # data_adapter and the callbacks take a FitState
    from stratagem.callbacks.callback import Callback
    from stratagem.models.data_adapter import EpochFeeder


class FitState:
    """The next epoch and step of a ``fit``, its data position, and its callbacks.

    Attributes:
        epoch: The epoch the loop runs next (or is running).
        step: Steps already taken in that epoch (non-zero only mid-epoch).
        feeder: The input feeder (``position()``/``restore()``), or None when steps run elsewhere (a coordinated
            fit) and there is no local position.
        callbacks: Every callback of this ``fit``, in call order.
    """

    def __init__(self, feeder: EpochFeeder | None, *, epoch: int, callbacks: list[Callback] | None = None) -> None:
        self.feeder, self.epoch, self.step = feeder, epoch, 0
        self.callbacks: list[Callback] = list(callbacks or [])

    def state(self) -> dict[str, Any]:
        """Epoch, step and data position as plain values (JSON-serialisable)."""
        data = self.feeder.position() if self.feeder is not None else None
        return {"epoch": self.epoch, "step": self.step, "data": data}

    def restore(self, state: dict[str, Any]) -> None:
        """Moves to a position returned by ``state()``."""
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        if self.feeder is not None and state.get("data") is not None:
            self.feeder.restore(state["data"], mid_epoch=self.step > 0)

    def finish(self) -> None:
        """Marks training as done: the loop runs no further epoch (a restarted, finished job)."""
        self.epoch, self.step = _PAST_THE_END, 0


_PAST_THE_END = 2**62  # an epoch after every real one


__all__ = ["FitState"]
