"""The Keras adapter (stratagem/models/keras_internals.py) against the installed Keras: its version, and each private.

The behaviour built on these (replica hooks, Keras models as torch modules, the loop guard) is tested in
tests/unit/tf and tests/unit/models; here each private name is read as the adapter reads it, so a Keras
upgrade that moves one fails here, naming it.
"""

from __future__ import annotations

import importlib

import stratagem  # noqa: F401  (the torch backend, before keras)
import keras
from stratagem.models import keras_internals as internals


def test_installed_keras_is_the_release_the_adapter_was_written_for() -> None:
    release = ".".join(keras.__version__.split(".")[:2])
    assert release == internals.WRITTEN_FOR, (
        f"Keras {keras.__version__} is installed, stratagem/models/keras_internals.py was written for "
        f"{internals.WRITTEN_FOR}: check every section there, then update WRITTEN_FOR and pyproject.toml")


def test_private_modules_define_the_classes_the_hooks_wrap() -> None:
    variable_class = importlib.import_module("keras.src.backend.common.variables").Variable
    metric_class = importlib.import_module("keras.src.metrics.metric").Metric
    optimizer_class = importlib.import_module("keras.src.optimizers.base_optimizer").BaseOptimizer
    # The hooks wrap methods defined in these classes themselves (not inherited from elsewhere).
    assert "__init__" in vars(variable_class) and "__init__" in vars(metric_class)
    assert "apply_gradients" in vars(optimizer_class)
    assert issubclass(keras.Variable, variable_class) and issubclass(keras.metrics.Metric, metric_class)
    assert issubclass(keras.optimizers.Optimizer, optimizer_class)
    # The variable hook reads the tensor a variable holds from `_value`.
    variable = keras.Variable([1.0, 2.0])
    assert variable._value is variable.value


def test_layer_variables_and_learning_rate_as_the_adapter_reads_them() -> None:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.BatchNormalization()])
    layers = internals.all_layers(model)
    assert layers[0] is model
    assert [type(layer).__name__ for layer in layers[1:]] == ["InputLayer", "Dense", "BatchNormalization"]
    trainable, non_trainable = internals.own_variables(layers[3])
    assert [v.name for v in trainable] == ["gamma", "beta"]
    assert [v.name for v in non_trainable] == ["moving_mean", "moving_variance"]
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    assert internals.learning_rate_setting(keras.optimizers.SGD(learning_rate=schedule)) is schedule


def test_functional_class_is_what_keras_model_inputs_outputs_returns() -> None:
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    assert type(model) is internals.keras_functional_class()


def test_data_adapter_reads_the_distribution_flag_the_loop_guard_sets() -> None:
    distribution_lib = importlib.import_module("keras.src.distribution.distribution_lib")
    source = importlib.import_module("keras.src.trainers.data_adapters").__file__
    text = open(source, encoding="utf-8").read()  # noqa: SIM115
    assert '"_is_multi_process"' in text and '"auto_shard_dataset"' in text
    assert callable(distribution_lib.distribution) and callable(distribution_lib.set_distribution)
    guard_class = internals._loop_guard_class(distribution_lib.Distribution)
    assert isinstance(guard_class(), distribution_lib.Distribution)
