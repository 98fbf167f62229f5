"""``CallbackList``: calls each hook on every callback that implements it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from stratagem.callbacks.callback import Callback, overrides
from stratagem.callbacks.keras_callback import KerasCallback, is_keras_callback

if TYPE_CHECKING:  # the model and fit modules import the callbacks
    from stratagem.models.fit_state import FitState
    from stratagem.models.model import Model

_HOOKS = [name for name in vars(Callback) if name.startswith("on_")]  # Keras' hooks, as Callback declares them


class CallbackList:
    """A container that forwards each Keras hook to the callbacks that override it.

    Args:
        callbacks: The callbacks, called in order; Keras callback objects run through ``KerasCallback``.
        model: The user's ``Model``, given to each callback.
        params: ``epochs``, ``steps``, ``verbose``, ``batch_size``.
        fit_state: The running fit's ``FitState``, handed to each callback.
    """

    def __init__(self, callbacks: Iterable[Callback], *, model: Model, params: dict[str, Any],
                 fit_state: FitState | None = None) -> None:
        self.callbacks = [KerasCallback(c) if is_keras_callback(c) else c for c in callbacks]
        for callback in self.callbacks:
            callback.set_model(model)
            callback.set_params(params)
            if fit_state is not None:
                callback.set_fit_state(fit_state)
        # Precomputed so a hook nobody implements costs nothing per step.
        self._users = {hook: [c for c in self.callbacks if overrides(c, hook)] for hook in _HOOKS}

    def wants(self, hook: str) -> bool:
        """True if some callback implements ``hook`` (the loop then computes its logs)."""
        return bool(self._users[hook])

    def any(self, predicate: Any) -> bool:
        """True if ``predicate(callback)`` holds for some callback."""
        return any(predicate(c) for c in self.callbacks)

    def call(self, hook: str, *args: Any) -> None:
        for callback in self._users[hook]:
            getattr(callback, hook)(*args)
