"""``KerasCallback``: a Keras 3 callback object (``keras.callbacks.Callback``) run in stratagem's loops.

``CallbackList`` wraps every Keras callback in one, so Keras's callbacks and users' subclasses run with Keras's
semantics: ``callback.model`` is the model ``fit`` was called on (the ``tf.keras`` model under ``stratagem.tf``);
``params`` holds ``epochs``, ``steps`` and ``verbose``; logs are plain dicts, reduced over every replica, batch logs
too (TF syncs a metric on read) when the callback implements a batch-end hook, at one all-reduce per step; hooks
it does not implement are never called. A train batch hook may set ``model.stop_training``, and every replica stops
after that batch (one small all-reduce per step). This module never imports Keras: a Keras callback exists only
once the user imported it.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from stratagem.callbacks.callback import Callback

if TYPE_CHECKING:  # the model module imports the callbacks
    from stratagem.models.model import Model

# Keras 3's base Callback runs these through their Keras 2 aliases: overriding either counts.
_ALIASES = {"on_train_batch_begin": "on_batch_begin", "on_train_batch_end": "on_batch_end"}
_HOOKS = [name for name in vars(Callback) if name.startswith("on_")]


def imported_keras() -> Any | None:
    # Not stratagem.models.keras_model's: stratagem.models imports this package.
    return sys.modules.get("keras")


def is_keras_callback(value: Any) -> bool:
    keras = imported_keras()
    return keras is not None and isinstance(value, keras.callbacks.Callback)


class KerasCallback(Callback):
    """Runs ``keras_callback``'s hooks in stratagem's loops.

    Args:
        keras_callback: A ``keras.callbacks.Callback``.

    Raises:
        ValueError: For ``keras.callbacks.BackupAndRestore``, which resumes through Keras's
            own ``fit`` (use ``stratagem.callbacks.BackupAndRestore``).
    """

    def __init__(self, keras_callback: Any) -> None:
        super().__init__()
        keras = imported_keras()
        assert keras is not None  # a Keras callback exists
        if isinstance(keras_callback, keras.callbacks.BackupAndRestore):
            raise ValueError(
                "keras.callbacks.BackupAndRestore resumes through private state of Keras's own fit loop, which "
                "stratagem's loop does not run: the restored run would restart at epoch 0. Use "
                "stratagem.callbacks.BackupAndRestore (tf.keras.callbacks.BackupAndRestore under stratagem.tf), "
                "which also restores the data position and RNG state on every replica. "
                f"Received: {type(keras_callback).__name__}")
        self.keras_callback = keras_callback
        base = keras.callbacks.Callback
        implemented = {hook for hook in _HOOKS if _implements(keras_callback, base, hook)}
        for hook in _HOOKS:
            if hook not in implemented:  # the marked no-op: CallbackList skips it, and the loop computes no logs
                setattr(self, hook, types.MethodType(getattr(Callback, hook), self))
        batch_hooks = {"on_train_batch_begin", "on_train_batch_end"} & implemented
        self.requires_global_batch_logs = "on_train_batch_end" in implemented
        self.stops_training = "batch" if batch_hooks else "epoch"

    def set_model(self, model: Model) -> None:
        super().set_model(model)
        facade = getattr(model, "_facade", None)
        self.keras_callback.set_model(facade if facade is not None else model)

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        self.keras_callback.set_params(dict(params))

    def __repr__(self) -> str:
        return f"KerasCallback({self.keras_callback!r})"


def _implements(callback: Any, base: type, hook: str) -> bool:
    """Whether ``callback`` does something in ``hook``: its class overrides it (or its alias), or it set one itself."""
    for name in (hook, _ALIASES.get(hook)):
        if name is None:
            continue
        if name in vars(callback) or getattr(type(callback), name, None) is not getattr(base, name, None):
            return True
    return False


def _forward(hook: str) -> Any:
    def call(self: KerasCallback, *args: Any) -> None:
        *head, logs = args
        # Keras hands hooks plain dicts of floats (never None); the loop's lazy logs are read here.
        getattr(self.keras_callback, hook)(*head, {} if logs is None else dict(logs))

    call.__name__ = hook
    return call


for _hook in _HOOKS:
    setattr(KerasCallback, _hook, _forward(_hook))


__all__ = ["KerasCallback", "is_keras_callback"]
