"""The one place that words a refusal for a TensorFlow name stratagem does not provide.

``ALTERNATIVES`` maps ``tf.<path>`` to what to use instead, or why it cannot exist here; other names get "not provided".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

_GRAPH_REASON = ("TF 1 graph mode (sessions, placeholders, graphs, variable scopes) does not exist here: stratagem "
                 "runs eagerly on torch, as TF 2 does. Write the TF 2 form: call functions on tensors, make state "
                 "with tf.Variable or Keras layers, and use tf.function where TF 1 built a graph")

# TF 1 graph-mode names: refused at the top level and in tf.compat.v1 with `_GRAPH_REASON`.
GRAPH_MODE: frozenset[str] = frozenset({
    "ConfigProto", "GPUOptions", "Graph", "GraphDef", "InteractiveSession", "RunMetadata", "RunOptions", "Session",
    "disable_eager_execution", "disable_v2_behavior", "get_default_graph", "get_default_session", "get_variable",
    "global_variables", "global_variables_initializer", "initialize_all_variables", "local_variables_initializer",
    "placeholder", "placeholder_with_default", "reset_default_graph", "tables_initializer", "trainable_variables",
    "variable_scope",
})

_TPU = ("TPU hardware is not supported: stratagem runs on torch's CPU and CUDA devices. Use MirroredStrategy "
        "(one host) or MultiWorkerMirroredStrategy (several) instead of TPUStrategy")

ALTERNATIVES: dict[str, str] = {
    **{f"tf.{name}": _GRAPH_REASON for name in GRAPH_MODE},
    **{f"tf.compat.v1.{name}": _GRAPH_REASON for name in GRAPH_MODE},
    "tf.tpu": _TPU,
    "tf.compat.v1.tpu": _TPU,
    "tf.config.experimental_connect_to_cluster": _TPU.replace("TPU hardware", "Connecting to a TPU cluster"),
    "tf.app": "TF 1's tf.app is not provided: use argparse and call your main() (absl.app.run works too)",
    "tf.flags": "TF 1's tf.flags is not provided: use argparse (or absl.flags)",
    "tf.logging": "TF 1's tf.logging is not provided: use Python's logging, or tf.get_logger() for TF's logger",
    "tf.layers": "TF 1's tf.layers is not provided: use tf.keras.layers (Keras 3)",
    "tf.summary": ("tf.summary is not provided: use tf.keras.callbacks.TensorBoard with fit, or "
                   "torch.utils.tensorboard.SummaryWriter in a custom loop"),
    "tf.feature_column": "tf.feature_column is not provided (Keras 3 dropped it): use Keras preprocessing layers",
    "tf.lite": "TensorFlow Lite conversion is not provided: export with tf.saved_model or torch.export",
    "tf.SparseTensor": "sparse tensors are not provided: use dense tensors (torch's sparse layout differs from TF's)",
    "tf.sparse": "tf.sparse is not provided: use dense tensors (torch's sparse layout differs from TF's)",
    "tf.RaggedTensor": "ragged tensors are not provided: pad them (Dataset.padded_batch) or keep Python lists",
    "tf.ragged": "tf.ragged is not provided: pad sequences (Dataset.padded_batch) or keep Python lists",
    "tf.TensorArray": ("tf.TensorArray is not provided: code runs eagerly here (tf.function runs the Python as "
                       "written), so append to a Python list and tf.stack it"),
    "tf.autograph": "tf.autograph is not needed: tf.function runs the Python function as written",
    "tf.raw_ops": "TF's raw ops are not provided: use the tf.* op of the same name, or torch directly",
    "tf.experimental": "tf.experimental is not provided: use torch or keras.ops for NumPy-style ops",
    "tf.hub": ("TensorFlow Hub models are not provided: its modules are TF graphs that torch cannot run; use a "
               "Keras 3 model or a torch model"),
    **{f"tf.estimator.{name}": ("premade Estimators are not provided: write a model_fn for tf.estimator.Estimator, "
                                "or build the Keras model and use tf.keras.estimator.model_to_estimator")
       for name in ("LinearRegressor", "LinearClassifier", "DNNClassifier", "DNNRegressor",
                    "DNNLinearCombinedClassifier", "DNNLinearCombinedRegressor", "BoostedTreesClassifier",
                    "BoostedTreesRegressor", "BaselineClassifier", "BaselineRegressor")},
    "tf.data.experimental.make_csv_dataset": ("CSV datasets are not provided: read the file with "
                                              "tf.data.TextLineDataset and split lines in map(), or load it "
                                              "with numpy/pandas and use Dataset.from_tensor_slices"),
    "tf.data.experimental.CsvDataset": ("CSV datasets are not provided: read the file with tf.data.TextLineDataset "
                                        "and split lines in map(), or load it with numpy/pandas"),
    "tf.data.experimental.rejection_resample": ("rejection resampling is not provided: balance classes with "
                                                "tf.data.Dataset.sample_from_datasets over one filtered dataset per "
                                                "class, or with fit's class_weight"),
    "tf.test": "tf.test is not provided: use pytest, and torch.testing.assert_close for tensors",
    # --- tf.distribute, tf.train (loops) ---
    "tf.distribute.Server": ("tf.distribute.Server is not needed: `stratagem run --ps P --workers W` (or each task "
                             "started with its TF_CONFIG) runs the parameter servers, and ParameterServerStrategy "
                             "connects to them"),
    "tf.distribute.experimental_set_strategy": ("a strategy set for the whole program is not kept: put the code in "
                                                "`with strategy.scope():`"),
    "tf.distribute.cluster_resolver.KubernetesClusterResolver": ("use TFConfigClusterResolver (TF_CONFIG), "
                                                                 "SlurmClusterResolver or SimpleClusterResolver"),
    "tf.train.Saver": "TF 1's Saver is not provided: use tf.train.Checkpoint and tf.train.CheckpointManager",
    "tf.train.MonitoredTrainingSession": _GRAPH_REASON,
}


def missing_name(namespace: str, name: str) -> AttributeError:
    """The ``AttributeError`` for ``<namespace>.<name>``: names it and the stratagem way, or says it is not provided."""
    path = f"{namespace}.{name}"
    hint = ALTERNATIVES.get(path)
    if hint is None and namespace.startswith("tf.contrib"):
        hint = "tf.contrib was removed in TF 2.0 and stratagem.tf provides only the contrib names the seeds use"
    if hint is None:
        hint = "stratagem.tf does not provide it; see the README section 'TensorFlow code' for what it does provide"
    return AttributeError(f"module 'stratagem.tf' has no attribute {path!r}: {hint}")


def module_getattr(namespace: str, *lazy: Mapping[str, str | tuple[str, str]],
                   cache: dict[str, Any] | None = None) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``namespace``'s module: ``lazy``'s names imported on first use, refusals for the rest.

    Each ``lazy`` table maps a name to a module path or ``(module path, attribute)``; a value found is put in ``cache``
    (the module's ``globals()``) so later lookups are plain ones.
    """

    def __getattr__(name: str) -> Any:
        target = next((table[name] for table in lazy if name in table), None)
        if target is None:
            raise missing_name(namespace, name)
        module = importlib.import_module(target if isinstance(target, str) else target[0])
        value = module if isinstance(target, str) else getattr(module, target[1])
        if cache is not None:
            cache[name] = value
        return value

    return __getattr__
