"""The one module that touches Keras 3's private attributes; each section names the Keras version it was written for.

A Keras upgrade is checked in this one file (``tests/unit/package/test_keras_internals.py`` checks ``WRITTEN_FOR``
and each private name used). Keras is imported inside functions only: strategies call in here with or without Keras.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from typing_extensions import override

from stratagem.distribute import collectives

if TYPE_CHECKING:  # strategies import this module inside functions
    from stratagem.distribute.strategy import Strategy

WRITTEN_FOR = "3.15"  # Keras's release (major.minor); pyproject.toml's keras extra allows exactly this one

# ---------------------------------------------------------------------------------------------------------------
# Custom training loops across replicas. Written for Keras 3.15.1 (torch backend).
#
# TF keeps a strategy's variables in sync itself; Keras 3 on torch has no distribution support, so Keras objects in a
# custom loop under several replicas would silently train and report per replica. Three hooks, installed the first
# time a strategy with several replicas enters its scope while Keras is imported, give objects made in that scope
# TF's semantics:
# - a trainable variable starts from the chief's value (TF broadcasts initial values);
# - `optimizer.apply_gradients` inside `strategy.run` sums the gradients over every replica first (TF's
#   `experimental_aggregate_gradients`), so N replicas make one replica's global-batch update; `apply` (Keras's own
#   train_step) is left alone; under ParameterServerStrategy it refuses;
# - a metric's `result()` outside `strategy.run` is over every replica (sync-on-read sums); inside, this replica's.
# NOTE: Keras has no hook for these on torch: `Variable.__init__` and `BaseOptimizer.apply_gradients` (defined once in
# 3.15.1) are wrapped, and each metric gets its own `result` at creation, since every metric class overrides it.
# ---------------------------------------------------------------------------------------------------------------

_install_lock = threading.Lock()
_installed = False
# A metric made in a strategy's scope -> that strategy (weakly: a metric does not keep a strategy alive).
_metric_strategies: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()


def install_replica_hooks() -> None:
    """Installs the three hooks above if Keras is imported; idempotent and cheap to call again."""
    global _installed
    keras = sys.modules.get("keras")
    if _installed or keras is None or keras.backend.backend() != "torch":
        return
    with _install_lock:
        if _installed:
            return
        from keras.src.backend.common.variables import Variable as KerasVariable
        from keras.src.metrics.metric import Metric
        from keras.src.optimizers.base_optimizer import BaseOptimizer

        KerasVariable.__init__ = _after_init(KerasVariable.__init__, _start_from_chief)  # type: ignore[method-assign]
        BaseOptimizer.apply_gradients = _apply_gradients(BaseOptimizer.apply_gradients)  # type: ignore[method-assign]
        Metric.__init__ = _after_init(Metric.__init__, _read_over_replicas)  # type: ignore[method-assign]
        _installed = True


def _syncing_strategy() -> Strategy | None:
    """The strategy in force if it has several replicas that all run this program (not parameter servers)."""
    from stratagem.distribute import context
    from stratagem.distribute.capabilities import SchedulesSteps, has

    if not context.has_strategy():
        return None
    strategy = context.get_strategy()
    if strategy.num_replicas_in_sync == 1 or has(strategy, SchedulesSteps):
        return None
    return strategy


def _after_init(init: Any, then: Callable[[Any, Strategy], None]) -> Any:
    """``init``, then ``then(self, strategy)`` when the object was made under a ``_syncing_strategy``."""
    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        strategy = _syncing_strategy()
        if strategy is not None:
            then(self, strategy)

    return wrapper


def _start_from_chief(variable: Any, strategy: Strategy) -> None:
    tensor = getattr(variable, "_value", None)  # None while Keras defers the initialization
    if not variable.trainable or not isinstance(tensor, torch.Tensor):
        return
    # NOTE: every replica builds the same model in the same order, so these collectives line up; the
    # chief's value plus zeros is the chief's value, exactly.
    mine = tensor.detach() if strategy.is_chief else torch.zeros_like(tensor)
    with torch.no_grad():
        tensor.copy_(strategy.reduce("sum", mine.to(strategy.device), axis=None).to(tensor.device))


def _apply_gradients(apply_gradients: Any) -> Any:
    @functools.wraps(apply_gradients)
    def wrapper(self: Any, grads_and_vars: Any, *args: Any, skip_gradients_aggregation: bool = False,
                experimental_aggregate_gradients: bool = True, **kwargs: Any) -> Any:
        from stratagem.distribute import context

        strategy = context.replica_strategy()
        if strategy is not None:
            _refuse_remote_variables(strategy)
        pairs = list(grads_and_vars)
        if (strategy is not None and strategy.num_replicas_in_sync > 1 and not skip_gradients_aggregation
                and experimental_aggregate_gradients):
            pairs = sum_gradients(strategy, pairs)
        return apply_gradients(self, pairs, *args, **kwargs)

    return wrapper


def _refuse_remote_variables(strategy: Strategy) -> None:
    from stratagem.distribute.capabilities import SchedulesSteps, has

    if not has(strategy, SchedulesSteps):
        return
    from stratagem.errors import ConfigurationError

    # NOTE: the variables live on the parameter servers; a Keras optimizer would update this worker's copy only,
    # and the next step's pull would silently undo it.
    raise ConfigurationError(
        f"A Keras optimizer's apply_gradients under {type(strategy).__name__} would update this worker's copy of the "
        "variables only; the parameter servers hold them. Train with model.fit (a tf.keras model, or "
        "stratagem.Model(keras_model), trains under ParameterServerStrategy), or write the step with torch: module = "
        "strategy.distribute_module(stratagem.models.keras_model.KerasModule(keras_model)), optimizer = "
        "strategy.distribute_optimizer(torch.optim.Adam(module.parameters())), loss.backward(), optimizer.step() "
        f"(README, ParameterServerStrategy). Received: strategy={type(strategy).__name__}")


def sum_gradients(strategy: Strategy, pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``(gradient, variable)`` pairs, gradients summed over every replica in one all-reduce; None stays None."""
    present = [i for i, (grad, _) in enumerate(pairs) if grad is not None]
    if not present:
        return pairs
    grads = [torch.as_tensor(pairs[i][0]) for i in present]
    # NOTE: summed before Keras clips them, so clipnorm/global_clipnorm see the global batch's gradient
    # (as tf.keras 2 did); Keras 3 on TF sums after clipping, which makes N replicas differ from one.
    summed = strategy.reduce("sum", collectives.flatten(grads, dtype=torch.float32, device=strategy.device), axis=None)
    parts = [torch.empty_like(grad) for grad in grads]  # each in its gradient's dtype and device
    collectives.unflatten_into(summed, parts)
    out = list(pairs)
    for i, part in zip(present, parts):
        out[i] = (part, pairs[i][1])
    return out


def _read_over_replicas(metric: Any, strategy: Strategy) -> None:
    _metric_strategies[metric] = weakref.ref(strategy)
    # NOTE: an instance attribute, not a class patch: each Keras metric class defines its own result.
    object.__setattr__(metric, "result", functools.partial(_metric_result, metric))


def local_result(metric: Any) -> Any:
    """``metric.result()`` from this replica's own variables, whatever scope made the metric."""
    return type(metric).result(metric)


def _metric_result(metric: Any) -> Any:
    from stratagem.distribute import context

    ref = _metric_strategies.get(metric)
    strategy = ref() if ref is not None else None
    if strategy is None or context.replica_strategy() is not None:
        return local_result(metric)  # inside strategy.run: this replica's value, as TF's replica context reads
    return global_result(metric, strategy)


def global_result(metric: Any, strategy: Strategy) -> Any:
    """``metric.result()`` over every replica: its variables combined by their aggregation, in one all-reduce.

    A collective, as TF's sync-on-read variables: every replica reads at the same point. The variables are put back.
    """
    import keras

    from stratagem.distribute.strategy import read_summed

    # "none", "only_first_replica": TF reads the local value, so they stay out of the sum.
    variables = [v for v in metric.variables if v.aggregation in ("sum", "mean")]

    def read() -> Any:
        for variable in variables:
            if variable.aggregation == "mean":
                variable.value.copy_(variable.value / strategy.num_replicas_in_sync)
        # Copies: a result may be a variable's own tensor (Keras's Sum), which read_summed then puts back.
        return keras.tree.map_structure(lambda t: torch.as_tensor(t).clone(), local_result(metric))

    with torch.no_grad():
        return read_summed(strategy, [v.value for v in variables], read)


# ---------------------------------------------------------------------------------------------------------------
# A Keras model as the torch module strategies train (keras_model.py, keras_compile.py). Written for Keras 3.15.1.
#
# Only private attributes list a layer's own variables and which it created non-trainable (moving statistics, not
# weights frozen later), and hold an optimizer's schedule itself (`learning_rate` reads its current value).
# ---------------------------------------------------------------------------------------------------------------


def all_layers(keras_model: Any) -> list[Any]:
    """``keras_model`` and every layer inside it, depth first, each once."""
    return list(keras_model._flatten_layers(include_self=True, recursive=True))


def own_variables(layer: Any) -> tuple[list[Any], list[Any]]:
    """The variables ``layer`` itself created: (trainable at creation, non-trainable at creation)."""
    return list(layer._trainable_variables), list(layer._non_trainable_variables)


def learning_rate_setting(keras_optimizer: Any) -> Any:
    """What the optimizer was given as ``learning_rate``: a float variable or the ``LearningRateSchedule`` itself."""
    return keras_optimizer._learning_rate


# ---------------------------------------------------------------------------------------------------------------
# tf.keras models trained by stratagem (stratagem/tf/keras/_models.py). Written for Keras 3.15.1.
#
# `Functional` is not exported, and Keras makes a `(inputs, outputs)` subclass functional by rewriting the bases of
# every class above it (`inject_functional_model_class`), stratagem's shared `tf.keras.Model` included;
# `become_functional` rewrites the user's classes only.
# ---------------------------------------------------------------------------------------------------------------


def keras_functional_class() -> type:
    """Keras's ``Functional`` model class (what ``keras.Model(inputs, outputs)`` returns)."""
    from keras.src.models.functional import Functional

    return Functional


def is_functional_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Model(*args, **kwargs)`` asks for a functional model, by Keras's own rule (``(inputs, outputs)``)."""
    return (len(args) == 2 or (len(args) == 1 and "outputs" in kwargs)
            or ("inputs" in kwargs and "outputs" in kwargs))


def become_functional(cls: type, model_class: type, functional_class: type) -> None:
    """Puts ``functional_class`` in place of ``model_class`` among the bases of ``cls`` and of its user ancestors."""
    if cls is model_class or not issubclass(cls, model_class) or issubclass(cls, functional_class):
        return
    for base in cls.__bases__:  # the user's own intermediate classes first
        become_functional(base, model_class, functional_class)
    cls.__bases__ = tuple(functional_class if base is model_class else base for base in cls.__bases__)


# ---------------------------------------------------------------------------------------------------------------
# Keras's own fit/evaluate/predict under a strategy with several replicas. Written for Keras 3.15.1.
#
# Keras's loops would train each replica alone on all the data, each writing checkpoints as the chief. Their
# `get_data_adapter` first reads the global Keras distribution's private `_is_multi_process`: `guard_keras_loops` sets
# a distribution (Keras's extension point for distributing fit) whose `_is_multi_process` raises while a strategy with
# several replicas exists; its layouts are None, so models run unchanged. A distribution the user set is left alone.
# ---------------------------------------------------------------------------------------------------------------

_loop_guard_lock = threading.Lock()


def guard_keras_loops() -> None:
    """Installs the guard as Keras's global distribution, unless one is set (idempotent)."""
    from keras.src.distribution import distribution_lib

    with _loop_guard_lock:
        if distribution_lib.distribution() is None:
            distribution_lib.set_distribution(_loop_guard_class(distribution_lib.Distribution)())


@functools.cache
def _loop_guard_class(base: type) -> type:
    class LoopGuard(base):  # type: ignore[misc, valid-type]
        """Refuses Keras's own data loop while stratagem runs several replicas; places nothing."""

        def __init__(self) -> None:  # no DeviceMesh: the torch backend has none
            self.auto_shard_dataset = True

        @property
        def _is_multi_process(self) -> bool:
            return _refuse_keras_loop()

        @override  # Keras calls it on the distribution in force
        def get_data_layout(self, data_shape: Any) -> None:
            return None

        @override  # Keras calls it on the distribution in force
        def get_variable_layout(self, variable: Any) -> None:
            return None

        @override  # Keras calls it on the distribution in force
        def get_tensor_layout(self, path: str) -> None:
            return None

        @override  # Keras calls it on the distribution in force
        def distribute_dataset(self, dataset: Any) -> Any:
            return dataset

    return LoopGuard


def _refuse_keras_loop() -> bool:
    from stratagem.distribute import context

    strategy = context.distributed_strategy()
    if strategy is None:
        return False
    from stratagem.errors import ConfigurationError

    raise ConfigurationError(
        f"Keras's own fit/evaluate/predict runs each replica alone: under {type(strategy).__name__} "
        f"({strategy.num_replicas_in_sync} replicas) every process would train its own copy of the model on all the "
        "data, without gradient all-reduce. Train it through stratagem: wrap it, `model = "
        "stratagem.Model(keras_model)` inside `strategy.scope()`, then compile/fit/evaluate/predict that; or build "
        "it with `stratagem.tf.keras` (`import stratagem.tf as tf`: tf.keras.Sequential and tf.keras.Model train "
        "through stratagem as written). For outputs alone, call the model: `keras_model(x)`. "
        f"Received: num_replicas_in_sync={strategy.num_replicas_in_sync}")


# ---------------------------------------------------------------------------------------------------------------
# Channels-last convolution and pooling without layout copies. Written for Keras 3.15.1 (torch backend).
#
# Keras's torch convolutions and poolings take channels-first tensors: `_transpose_spatial_inputs` permutes an NHWC
# input to NCHW and copies it (`.contiguous()`), `conv` copies it back to `torch.channels_last`, and pooling's output,
# permuted back, is strided, so the next layer copies again. The permuted view of an NHWC tensor IS an NCHW tensor in
# `torch.channels_last` format, which torch's CPU kernels take as it is (fastest) and whose outputs permute back to
# contiguous NHWC. The replacement returns that view for 2-D and 3-D inputs (1-D keeps Keras's copy); callers look the
# function up at call time, so one replacement covers all. Outputs and gradients match Keras's path within 1e-6
# (tests/unit/models/test_keras_layout.py); no variable changes layout.
# NOTE: installed when stratagem first meets Keras (KerasModule, `import stratagem.tf.keras`), for the whole process:
# a Keras model the user calls directly then runs the same way, with the same numbers.
# ---------------------------------------------------------------------------------------------------------------

_layout_lock = threading.Lock()


def install_channels_last_layout() -> None:
    """Makes Keras's torch backend keep channels-last inputs as channels-last views (idempotent)."""
    keras = sys.modules.get("keras")
    if keras is None or keras.backend.backend() != "torch":
        return
    from keras.src.backend.torch import nn as torch_nn

    with _layout_lock:
        if getattr(torch_nn._transpose_spatial_inputs, "_stratagem_channels_last", False):
            return
        torch_nn._transpose_spatial_inputs = _channels_last_view(torch_nn._transpose_spatial_inputs)


def _channels_last_view(transpose_spatial_inputs: Any) -> Any:
    @functools.wraps(transpose_spatial_inputs)  # `__wrapped__` is Keras's own, for the tests' reference path
    def channels_first_view(inputs: torch.Tensor) -> torch.Tensor:
        if inputs.ndim == 4:  # NHWC -> NCHW view, torch.channels_last memory format: no copy
            return torch.permute(inputs, (0, 3, 1, 2))
        if inputs.ndim == 5:  # NDHWC -> NCDHW view, torch.channels_last_3d
            return torch.permute(inputs, (0, 4, 1, 2, 3))
        return transpose_spatial_inputs(inputs)

    channels_first_view._stratagem_channels_last = True  # type: ignore[attr-defined]
    return channels_first_view


# ---------------------------------------------------------------------------------------------------------------
# Keras in forked data workers. Written for Keras 3.15.1 (torch backend).
#
# `map` workers are forked, maybe after the parent initialised CUDA, which a forked child cannot use; Keras puts
# tensors on the GPU whenever there is one. `run_keras_on_cpu` makes the CPU Keras's device there, for a Keras imported
# before the fork (private `global_state`) and one imported after (`KERAS_TORCH_DEVICE`).
# ---------------------------------------------------------------------------------------------------------------


def run_keras_on_cpu() -> None:
    """Makes Keras (torch backend) create its tensors on the CPU in this process, whether imported yet or not."""
    import os

    os.environ["KERAS_TORCH_DEVICE"] = "cpu"
    if "keras.src.backend.common.global_state" in sys.modules:
        from keras.src.backend.common import global_state

        global_state.set_global_attribute("torch_device", "cpu")


# ---------------------------------------------------------------------------------------------------------------
# The device Keras computes on: public API (keras.device), here because strategies reach Keras only through here.
# ---------------------------------------------------------------------------------------------------------------


def keras_device(device: torch.device) -> Any:
    """A context in which Keras makes its tensors (inputs, labels, metric values, variables) on ``device``.

    Keras's own default is the GPU whenever there is one, whatever device the strategy placed the model on.
    """
    import keras

    # "cpu", not "cpu:0": Keras moves each new variable to its device, and torch copies a CPU tensor "to" cpu:0
    # (devices compare unequal), which turns a Parameter into a plain tensor.
    return keras.device(str(device))



def keras_leaves_host() -> bool:
    """Whether Keras's default device is not the CPU (a GPU is present, or ``KERAS_TORCH_DEVICE`` names one).

    Written for Keras 3.15 (``keras.src.backend.torch.core.DEFAULT_DEVICE``, fixed when Keras is imported).
    """
    core = sys.modules.get("keras.src.backend.torch.core")
    return core is not None and not str(core.DEFAULT_DEVICE).startswith("cpu")


def host_device() -> Any | None:
    """``keras.device("cpu")`` where Keras would make its tensors elsewhere now; ``None`` where it would not.

    Written for Keras 3.15 (``keras.src.backend.torch.core.get_device``). tf.data runs its functions on the host, so
    ``stratagem.data`` calls a ``map``/``filter`` function in this context: Keras ops there make CPU tensors.
    """
    core = sys.modules.get("keras.src.backend.torch.core")
    if core is None or str(core.get_device()).startswith("cpu"):
        return None
    import keras

    return keras.device("cpu")
