"""TensorFlow's names on stratagem: ``import stratagem.tf as tf`` and the rest of a script as written.

This package holds names, argument translation and refusals only: behaviour comes from the stratagem module that owns
it, from Keras 3 (torch backend) or from torch; tensors are torch tensors. Names are imported on first use, so
``import stratagem.tf`` stays cheap, and a name not provided raises an ``AttributeError`` saying the stratagem way.
"""

from __future__ import annotations

from stratagem.tf._refusal import module_getattr

# The TensorFlow release whose API this namespace follows and was checked against (stratagem's own version is
# stratagem.__version__): scripts that print or compare tf.__version__ see the API they were written for.
__version__ = "2.21.0"

# Submodules: `tf.<name>` -> the module that holds TF's names for that namespace.
_SUBMODULES: dict[str, str] = {
    # --- tf.keras (Keras 3 trained by stratagem) ---
    "keras": "stratagem.tf.keras",
    # --- custom training loops and state ---
    "distribute": "stratagem.tf.distribute",
    "train": "stratagem.tf.train",
    "saved_model": "stratagem.tf.saved_model",
    # --- ops, dtypes, data, config, files ---
    "dtypes": "stratagem.tf.dtypes",
    "math": "stratagem.tf.math",
    "linalg": "stratagem.tf.linalg",
    "nn": "stratagem.tf.nn",
    "random": "stratagem.tf.random",
    "config": "stratagem.tf.config",
    "io": "stratagem.tf.io",
    "data": "stratagem.tf.data",
    "image": "stratagem.tf.image",
    "strings": "stratagem.tf.strings",
    "lookup": "stratagem.tf.lookup",
    "estimator": "stratagem.tf.estimator",
    "errors": "stratagem.tf.errors",
    # --- TF 1 namespaces: their names resolve to the TF 2 homes, or refuse with the reason ---
    "contrib": "stratagem.tf.contrib",
    "compat": "stratagem.tf.compat",
}


def _names(module: str, *names: str) -> dict[str, tuple[str, str]]:
    return {name: (module, name) for name in names}


# Top-level names that live in a submodule of this package: `tf.<name>` -> (module, attribute).
_LAZY_NAMES: dict[str, tuple[str, str]] = {
    # --- custom training loops ---
    "GradientTape": ("stratagem.tf._autodiff", "GradientTape"),
    # --- ops, dtypes, data, config, files ---
    **_names("stratagem.tf.dtypes", "DType", "as_dtype", "bfloat16", "bool", "complex128", "complex64", "double",
             "float16", "float32", "float64", "half", "int16", "int32", "int64", "int8", "string", "uint16",
             "uint32", "uint64", "uint8"),
    **_names("stratagem.tf._tensor", "Tensor", "TensorShape", "TensorSpec", "TypeSpec", "is_tensor",
             "newaxis"),
    **_names("stratagem.tf._array_ops", "add_n", "argsort", "boolean_mask", "cast", "concat", "constant",
             "convert_to_tensor", "expand_dims", "fill", "gather", "identity", "linspace", "one_hot", "ones",
             "ones_like", "pad", "print", "range", "rank", "reshape", "reverse", "saturate_cast", "shape", "size",
             "slice", "sort", "split", "squeeze", "stack", "tile", "transpose", "unique", "unstack", "where",
             "zeros", "zeros_like"),
    **_names("stratagem.tf.math", "abs", "add", "argmax", "argmin", "cos", "cumsum", "divide", "equal", "exp",
             "floor", "floordiv", "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_not",
             "logical_or", "maximum", "minimum", "multiply", "negative", "not_equal", "pow", "reduce_all",
             "reduce_any", "reduce_logsumexp", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod",
             "reduce_std", "reduce_sum", "reduce_variance", "round", "sigmoid", "sign", "sin", "sqrt", "square",
             "subtract", "tanh", "truediv", "truncatediv", "truncatemod"),
    **_names("stratagem.tf.linalg", "matmul", "norm"),
    **_names("stratagem.tf._clip_ops", "clip_by_global_norm", "clip_by_norm", "clip_by_value"),
    **_names("stratagem.tf._variable", "Variable", "VariableAggregation", "VariableSynchronization"),
    **_names("stratagem.tf._function", "function", "numpy_function", "py_function"),
    **_names("stratagem.tf._runtime", "device", "executing_eagerly", "get_logger", "name_scope"),
    # --- TF 2's short names for Keras's namespaces (tf.metrics is tf.keras.metrics in TF 2.21 too) ---
    **{name: ("stratagem.tf.keras", name) for name in ("losses", "metrics", "optimizers")},
    # --- TF 1 top-level names, at their TF 2 homes ---
    "read_file": ("stratagem.io", "read_file"),
    "string_split": ("stratagem.tf.compat.v1", "string_split"),
}


__getattr__ = module_getattr("tf", _SUBMODULES, _LAZY_NAMES, cache=globals())


def __dir__() -> list[str]:
    # The public names only: every one resolves (tests/unit/tf/test_names.py walks them all).
    return sorted(set(_SUBMODULES) | set(_LAZY_NAMES))
