"""``Callback``: the Keras hook interface. Hooks left as the base's no-ops are skipped."""

from __future__ import annotations

import enum
import os
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the model and fit modules import the callbacks
    from stratagem.models.fit_state import FitState
    from stratagem.models.model import Model
    from stratagem.optimizers import Optimizer

F = TypeVar("F", bound=Callable[..., Any])


def _noop(fn: F) -> F:
    fn._stratagem_noop = True  # type: ignore[attr-defined]
    return fn


class StopsTraining(str, enum.Enum):
    """Where a callback may set ``model.stop_training``, so the loop knows when replicas must agree.

    A ``str`` enum: ``"batch"`` works wherever ``StopsTraining.BATCH`` does, and any other string raises, so a
    misspelt value cannot silently turn the stop agreement off.
    """

    NEVER = "never"  # the callback never stops training
    GLOBAL_LOGS = "global_logs"  # only from epoch logs, already reduced: every replica decides alike
    EPOCH = "epoch"  # from anything, in epoch hooks: replicas agree once per epoch (the safe default)
    BATCH = "batch"  # also in batch hooks: replicas agree after every step (one small all-reduce)

    @classmethod
    def parse(cls, value: StopsTraining | str, *, owner: str) -> StopsTraining:
        """The member for ``value``; anything else raises ``ValueError`` naming ``owner`` and the valid values."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(member.value) for member in cls)
            raise ValueError(
                f"{owner}.stops_training must be one of {valid} (or a StopsTraining member): the loop decides "
                f"from it when replicas agree to stop. Received: stops_training={value!r}") from None


class Callback:
    """Base class of callbacks, with Keras' hook names and ``logs`` keys.

    ``self.model`` is the user's ``stratagem.Model`` (never the DDP wrapper); ``self.params`` holds ``epochs``,
    ``steps``, ``verbose`` and ``batch_size``. Hooks run on every replica; ``logs`` values are already reduced
    across replicas. Callbacks that write files must write on the chief only
    (``self.model.distribute_strategy.is_chief``).
    """

    def __init__(self) -> None:
        self.model: Model = None  # type: ignore[assignment]  # set_model gives it before any hook runs
        self.params: dict[str, Any] = {}
        self.fit_state: FitState | None = None  # the running fit's FitState (epoch, step, data position)

    # What the callback needs from the loop. Declared, so that a default fit makes no collective beyond the gradient
    # all-reduce (see stratagem.models.runners). True: batch hooks get ``logs`` reduced over every replica (one
    # all-reduce per step); otherwise they get this replica's running values (the same on one replica).
    requires_global_batch_logs: bool = False
    # Where this callback may set ``model.stop_training`` (``StopsTraining``); checked when a subclass is defined and
    # again when fit starts (an instance may set it too).
    stops_training: StopsTraining | str = StopsTraining.EPOCH

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "stops_training" in vars(cls):  # a typo fails where the class is written, not silently in fit
            cls.stops_training = StopsTraining.parse(cls.stops_training, owner=cls.__name__)

    # Attributes BackupAndRestore saves and restores (counters, best values); plain JSON values.
    _state_keys: tuple[str, ...] = ()

    def get_state(self) -> dict[str, Any]:
        """This callback's counters, for ``BackupAndRestore``."""
        return {key: getattr(self, key) for key in self._state_keys}

    def set_state(self, state: dict[str, Any]) -> None:
        for key in self._state_keys:
            if key in state:
                setattr(self, key, state[key])

    def set_model(self, model: Model) -> None:
        self.model = model

    @property
    def _optimizer(self) -> Optimizer:
        """The model's optimizer (hooks that read or set the learning rate)."""
        assert self.model.optimizer is not None, "fit compiles the model before it calls any hook"
        return self.model.optimizer

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def set_fit_state(self, fit_state: FitState) -> None:
        """Receives the running ``fit``'s ``FitState`` (``BackupAndRestore`` saves and moves it)."""
        self.fit_state = fit_state

    def _use_batch_logs(self, used: bool) -> None:
        """Sets ``requires_global_batch_logs``; unused, ``on_train_batch_end`` stays the skipped no-op."""
        self.requires_global_batch_logs = used
        if not used:
            # NOTE: batch logs cost an all-reduce every step and a per-epoch setting never reads them, so the hook
            # stays the skipped no-op; it depends on the setting, never the rank: replicas stay in step.
            self.on_train_batch_end = types.MethodType(Callback.on_train_batch_end, self)  # type: ignore[method-assign]

    def _writing(self) -> bool:
        # Only the chief writes files: N replicas writing one run would interleave rows or give N event files.
        return self.model.distribute_strategy.is_chief

    def _say(self, message: str) -> None:
        # Printed once, by the chief, and only by a callback made with verbose > 0.
        if getattr(self, "verbose", 0) > 0 and self.model.distribute_strategy.is_chief:
            print(message)

    @_noop
    def on_train_begin(self, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_train_end(self, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_train_batch_begin(self, batch: int, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_test_begin(self, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_test_end(self, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_test_batch_begin(self, batch: int, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_test_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_predict_begin(self, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_predict_end(self, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_predict_batch_begin(self, batch: int, logs: dict[str, float] | None = None) -> None: ...
    @_noop
    def on_predict_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None: ...


def check_mode(owner: str, mode: str) -> None:
    """Raises unless ``mode`` is one of the monitoring callbacks' modes: "auto", "min" or "max"."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"{owner} mode must be one of ['auto', 'min', 'max']. Received: mode={mode!r}")


def check_path(owner: str, name: str, value: Any) -> str:
    """Returns the path ``value`` as a string; raises if it is not a path or is empty (Keras refuses both)."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{owner} {name} must be a path (a str or os.PathLike). Received: {name} of type "
                        f"{type(value).__name__}")
    path = os.fspath(value)
    if not str(path).strip():
        raise ValueError(f"{owner} needs a {name} to write to, but it is empty. Pass a path, e.g. "
                         f"{name}='/tmp/run1'. Received: {name}={path!r}")
    return str(path)


def overrides(callback: Callback, hook: str) -> bool:
    """True if ``callback`` implements ``hook`` itself rather than inheriting the no-op."""
    # Looked up on the instance: a callback may set a hook per instance (LambdaCallback).
    return not getattr(getattr(callback, hook), "_stratagem_noop", False)
