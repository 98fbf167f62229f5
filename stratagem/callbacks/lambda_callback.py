"""``LambdaCallback``: a callback built from plain functions, one per hook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stratagem.callbacks.callback import Callback
from stratagem.callbacks.callback_list import _HOOKS

_Hook = Callable[..., Any]
# Keras' Callback routes its older batch hooks to the training ones.
_ALIASES = {"on_batch_begin": "on_train_batch_begin", "on_batch_end": "on_train_batch_end"}


class LambdaCallback(Callback):
    """Calls the given functions at the matching hooks, as ``keras.callbacks.LambdaCallback``.

    Epoch hooks take ``(epoch, logs)``, batch hooks ``(batch, logs)``, begin/end hooks ``(logs)``; the named
    arguments are ``on_epoch_begin``, ``on_epoch_end``, ``on_train_begin``, ``on_train_end``,
    ``on_train_batch_begin`` and ``on_train_batch_end``, and any other hook of ``Callback`` may be given as a
    keyword (``on_test_end=...``). Only these hooks run; the rest stay no-ops that ``CallbackList`` skips, so an
    unused batch hook costs no per-step all-reduce of the logs. The functions run on every replica; one that writes
    should check ``model.distribute_strategy.is_chief``.

    Raises:
        TypeError: If a keyword is not a hook name.

    Example:
        >>> print_lr = stratagem.callbacks.LambdaCallback(  # doctest: +SKIP
        ...     on_epoch_end=lambda epoch, logs: print(epoch, model.optimizer.learning_rate))
        >>> model.fit(x, y, epochs=3, callbacks=[print_lr])  # doctest: +SKIP
    """

    def __init__(self, on_epoch_begin: _Hook | None = None, on_epoch_end: _Hook | None = None,
                 on_train_begin: _Hook | None = None, on_train_end: _Hook | None = None,
                 on_train_batch_begin: _Hook | None = None, on_train_batch_end: _Hook | None = None,
                 **kwargs: _Hook) -> None:
        super().__init__()
        hooks: dict[str, _Hook | None] = {
            "on_epoch_begin": on_epoch_begin, "on_epoch_end": on_epoch_end, "on_train_begin": on_train_begin,
            "on_train_end": on_train_end, "on_train_batch_begin": on_train_batch_begin,
            "on_train_batch_end": on_train_batch_end,
        }
        for name, extra in kwargs.items():
            hook = _ALIASES.get(name, name)
            if hook not in _HOOKS:
                raise TypeError(f"LambdaCallback got an unknown hook. Expected one of {list(_HOOKS)}. Received: {name}")
            hooks[hook] = extra
        for hook, fn in hooks.items():
            if fn is not None:
                # An instance attribute shadows the class's marked no-op, so overrides() counts exactly the hooks
                # given here.
                setattr(self, hook, fn)
