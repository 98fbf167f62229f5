"""The one module that touches torch's private names and layouts; written for torch 2.13 (``WRITTEN_FOR``).

A torch upgrade is checked here (``tests/unit/package/test_torch_internals.py`` checks the version and each name).
Sections: multi-tensor kernels (optimizer rules, accumulation, loss scaling); the deferred ``torch._dynamo`` import
of the optimizer methods (seeded when this module is imported) and built-in steps; ``nn.Module``'s buffer registry
(Keras models as modules); ``torch.export``'s program and archive (``Model.save``/``load_model``); DCP's metadata
(sharded checkpoints); the elastic rendezvous's state pickle (``--nnodes MIN:MAX``). CPython's privates are in
``_python_internals.py``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import _use_grad_for_differentiable

WRITTEN_FOR = "2.13"  # torch's release (major.minor); pyproject.toml allows exactly this one

# ---------------------------------------------------------------------------------------------------------------
# Multi-tensor kernels. torch 2.13 has them only as `torch._foreach_*` (what torch.optim calls); later torch
# releases add the public `torch.foreach` module and keep these names "for compatibility during migration".
# `foreach.mul_(tensors, 2.0)` is `torch._foreach_mul_(tensors, 2.0)`.
# ---------------------------------------------------------------------------------------------------------------

FOREACH_OPS = ("abs", "add", "add_", "addcdiv_", "addcmul", "addcmul_", "clamp_max_", "clamp_min", "clamp_min_",
               "div", "div_", "lerp", "lerp_", "maximum_", "mul", "mul_", "norm", "reciprocal_", "sign_", "sqrt_",
               "sub_")
foreach: Any = types.SimpleNamespace(**{name: getattr(torch, f"_foreach_{name}") for name in FOREACH_OPS})


def unscale_and_check_finite_(grads: list[torch.Tensor], found_inf: torch.Tensor, inverse_scale: torch.Tensor) -> None:
    """Multiplies ``grads`` (one device and dtype) by ``inverse_scale`` in place; sets ``found_inf`` to 1 on inf/NaN.

    The kernel ``torch.amp.GradScaler`` runs (``torch._amp_foreach_non_finite_check_and_unscale_``).
    """
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inverse_scale)


# ---------------------------------------------------------------------------------------------------------------
# The optimizer methods' torch._dynamo import. torch.optim.Optimizer's add_param_group (every constructor runs it),
# zero_grad, state_dict and load_state_dict are wrapped by `torch._disable_dynamo` (torch/_compile.py): the wrapper's
# first call imports torch._dynamo (~1.3 s of CPU) to build `torch._dynamo.disable(method)`, cached on the undecorated
# function as `__dynamo_disable`, and calls that. Until torch._dynamo is imported nothing can be tracing and no frame
# callback can be set (only torch._dynamo sets one, and torch.compile and torch.export import it first), so that
# disable changes nothing: the cache is seeded with the undecorated function itself, and the seeds are dropped the
# moment torch._dynamo's import begins (an import-system finder that finds nothing), so from then on torch's own
# path runs as if they had never been there. A process whose optimizers step without torch.optim's built-in `step`
# (stratagem's Keras rules; Adam's through `builtin_step` below) and wraps no DDP then never imports torch._dynamo.
# ---------------------------------------------------------------------------------------------------------------

DYNAMO_DISABLED_OPTIMIZER_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
_DYNAMO_DISABLE_CACHE = "__dynamo_disable"  # where torch._disable_dynamo's wrapper caches its disable


def undecorated_optimizer_methods() -> list[Callable[..., Any]]:
    """The functions that ``torch._disable_dynamo`` wrapped as ``DYNAMO_DISABLED_OPTIMIZER_METHODS``."""
    return [getattr(torch.optim.Optimizer, name).__wrapped__ for name in DYNAMO_DISABLED_OPTIMIZER_METHODS]


def defer_dynamo_import() -> None:
    """Seeds the methods' disable caches until torch._dynamo is imported (nothing if it already was)."""
    if "torch._dynamo" in sys.modules or any(isinstance(f, _DynamoImportWatch) for f in sys.meta_path):
        return
    for function in undecorated_optimizer_methods():
        if getattr(function, _DYNAMO_DISABLE_CACHE, None) is None:
            setattr(function, _DYNAMO_DISABLE_CACHE, function)
    sys.meta_path.insert(0, _DynamoImportWatch())  # first: it must see the import before a finder serves it


class _DynamoImportWatch(importlib.abc.MetaPathFinder):
    """Drops the seeds when torch._dynamo's import begins; finds no module itself."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torch._dynamo":
            # NOTE: the finder stays on sys.meta_path: the import system is iterating that list right now.
            for function in undecorated_optimizer_methods():
                if getattr(function, _DYNAMO_DISABLE_CACHE, None) is function:
                    delattr(function, _DYNAMO_DISABLE_CACHE)
        return None


defer_dynamo_import()  # NOTE: at import, so that every optimizer built after any torch-using stratagem module has it

# torch.optim's built-in steps (SGD's, Adam's ...) are wrapped by `_use_grad_for_differentiable`, which imports
# torch._dynamo on every call for two `torch._dynamo.graph_break()`s around the update: no-ops unless dynamo traces.
_USE_GRAD_CODE = _use_grad_for_differentiable(lambda *args: None).__code__


def builtin_step(optimizer: torch.optim.Optimizer, step: Callable[..., Any]) -> Any:
    """``step(optimizer)``, a torch.optim class's built-in step, without importing torch._dynamo if it was not."""
    if "torch._dynamo" in sys.modules or getattr(step, "__code__", None) is not _USE_GRAD_CODE:
        return step(optimizer)
    # The wrapper's work less its graph breaks: the update runs with autograd on only if `differentiable` asks.
    previous = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(optimizer.defaults["differentiable"])
        return step.__wrapped__(optimizer)  # type: ignore[attr-defined]
    finally:
        torch.set_grad_enabled(previous)


# ---------------------------------------------------------------------------------------------------------------
# nn.Module's buffer registry. torch moves a buffer by putting a new tensor in `module._buffers` (parameters are
# moved in place); a Keras variable's own tensor must stay the registered one (keras_model.KerasModule._apply).
# ---------------------------------------------------------------------------------------------------------------


def registered_buffer(module: nn.Module, name: str) -> torch.Tensor | None:
    """The tensor ``module`` holds as its buffer ``name`` (not its children's)."""
    return module._buffers[name]


def put_buffer(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
    """Makes ``tensor`` itself ``module``'s buffer ``name`` again (``register_buffer`` would also reset its flags)."""
    module._buffers[name] = tensor


# ---------------------------------------------------------------------------------------------------------------
# torch.export's program and its `.pt2` archive (models/saving.py, models/_pt2_archive.py).
# An ExportedProgram keeps guard source code in `_guards_code`, which `module()` exec's; an archive written by
# `torch.export.save` holds the entries below (under one top folder), its graph in `models/model.json`.
# ---------------------------------------------------------------------------------------------------------------


def drop_guards_code(program: torch.export.ExportedProgram) -> None:
    """Removes the guard source that ``ExportedProgram.module()`` would exec (saved archives must hold none)."""
    program._guards_code = []


def is_aten_overload(value: object) -> bool:
    """Whether ``value`` is an ATen operator overload (``torch.ops.aten.add.Tensor``)."""
    return isinstance(value, torch._ops.OpOverload)


# The entries torch.export.save writes for a program without sample inputs or custom objects.
PT2_ENTRY = re.compile(
    r"(?:archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id|models/model\.json"
    r"|data/sample_inputs/model\.pt|data/weights/model_weights_config\.json|data/weights/weight_\d+"
    r"|data/constants/model_constants_config\.json|data/constants/tensor_\d+)")
PT2_REQUIRED = ("models/model.json", "data/sample_inputs/model.pt", "data/weights/model_weights_config.json",
                "data/constants/model_constants_config.json")
# Node targets of symbolic-int arithmetic in a program's graph, as the archive names them.
PT2_SYMBOLIC_TARGETS = frozenset(
    [f"_operator.{name}" for name in ("add", "sub", "mul", "floordiv", "mod", "pow", "truediv", "neg", "pos",
                                      "eq", "ne", "le", "ge", "lt", "gt", "and_", "or_")]
    + ["math.trunc", "torch.sym_not", "torch.sym_int", "torch.sym_float", "torch.sym_ite", "torch.sym_max",
       "torch.sym_min", "torch.sym_sqrt", "torch._sym_sqrt"])
# torch's sympy functions that shape expressions (`expr_str`) may name.
PT2_SHAPE_FUNCTIONS = frozenset({
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator",
    "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity", "Max", "Min", "Eq", "Ne",
    "Lt", "Le", "Gt", "Ge", "And", "Or", "Not", "True", "False", "oo",
})

# ---------------------------------------------------------------------------------------------------------------
# DCP's metadata file (checkpoint/sharded.py, checkpoint/unpickling.py). DCP's coordinator writes `.metadata`
# (per-rank `__<rank>.metadata` when asked), a bare pickle of `Metadata`, with `pickle.dump`; these are the
# (module, name) pairs such a pickle names in torch 2.13, private ones among them.
# ---------------------------------------------------------------------------------------------------------------

DCP_METADATA_FILE = ".metadata"
_DCP_METADATA = "torch.distributed.checkpoint.metadata"
_DTYPES = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "bfloat16",
           "float32", "float64", "complex32", "complex64", "complex128", "float8_e4m3fn", "float8_e4m3fnuz",
           "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
DCP_METADATA_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    (_DCP_METADATA, "Metadata"), (_DCP_METADATA, "MetadataIndex"), (_DCP_METADATA, "StorageMeta"),
    (_DCP_METADATA, "TensorStorageMetadata"), (_DCP_METADATA, "BytesStorageMetadata"),
    (_DCP_METADATA, "ChunkStorageMetadata"), (_DCP_METADATA, "TensorProperties"),
    (_DCP_METADATA, "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"),
    *(("torch", dtype) for dtype in _DTYPES),
})


def dcp_metadata_file(rank: int | None) -> str:
    """The name of DCP's metadata file in a checkpoint folder (one per rank when ``rank`` is given)."""
    return DCP_METADATA_FILE if rank is None else f"__{rank}{DCP_METADATA_FILE}"

# ---------------------------------------------------------------------------------------------------------------
# torch.distributed.elastic's rendezvous state (launcher/_rendezvous_state.py). DynamicRendezvousHandler keeps its
# `_RendezvousState` in the store as a bare pickle (`pickle.dumps`/`pickle.loads`) whose participants are
# `_NodeDesc`s with UTC heartbeat times; these are the (module, name) pairs such a pickle names in torch 2.13.
# ---------------------------------------------------------------------------------------------------------------

_DYNAMIC_RENDEZVOUS = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
RENDEZVOUS_STATE_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    (_DYNAMIC_RENDEZVOUS, "_RendezvousState"), (_DYNAMIC_RENDEZVOUS, "_NodeDesc"),
    ("datetime", "datetime"), ("datetime", "timezone"), ("datetime", "timedelta"),
})
