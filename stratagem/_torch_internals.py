"""The one module that touches torch's private names and layouts; written for torch 2.13 (``WRITTEN_FOR``).

A torch upgrade is checked here (``tests/unit/package/test_torch_internals.py`` checks the version and each name).
Sections: multi-tensor kernels (optimizer rules, accumulation, loss scaling); the deferred ``torch._dynamo`` import
of the optimizer methods (a base class for stratagem's optimizers) and built-in steps; ``nn.Module``'s buffer registry
(Keras models as modules); ``torch.export``'s program and archive (``Model.save``/``load_model``); DCP's metadata
(sharded checkpoints); the elastic rendezvous's state pickle and keep-alive timer (``--nnodes MIN:MAX``). CPython's
privates are in ``_python_internals.py``.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import _use_grad_for_differentiable
from typing_extensions import override

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
# first call imports torch._dynamo (~1.3 s of CPU) to build `torch._dynamo.disable(method)` and calls that. Until
# torch._dynamo is imported nothing can be tracing and no frame callback can be set (only torch._dynamo sets one, and
# torch.compile and torch.export import it first), so that disable changes nothing. `DeferredDynamoOptimizer`, the
# base of stratagem's own optimizer classes, overrides the four methods: they call torch's undecorated function
# (`__wrapped__`) while torch._dynamo is not in sys.modules, and torch's wrapper (`super()`) from then on. No torch
# object is changed. A process whose optimizers are stratagem's (Keras rules; Adam's step through `builtin_step`
# below) and that wraps no DDP then never imports torch._dynamo.
# ---------------------------------------------------------------------------------------------------------------

DYNAMO_DISABLED_OPTIMIZER_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


def undecorated_optimizer_methods() -> list[Callable[..., Any]]:
    """The functions that ``torch._disable_dynamo`` wrapped as ``DYNAMO_DISABLED_OPTIMIZER_METHODS``."""
    return [getattr(torch.optim.Optimizer, name).__wrapped__ for name in DYNAMO_DISABLED_OPTIMIZER_METHODS]


_ADD_PARAM_GROUP, _ZERO_GRAD, _STATE_DICT, _LOAD_STATE_DICT = undecorated_optimizer_methods()


class DeferredDynamoOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` whose dynamo-disabled methods import no torch._dynamo until something else has.

    A base for stratagem's optimizer classes (put it before a torch.optim class that overrides none of the four).
    """

    @override
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        # NOTE: torch.optim.Optimizer.__init__ calls self.add_param_group, so the constructor reaches this one.
        if "torch._dynamo" in sys.modules:
            return super().add_param_group(param_group)
        return _ADD_PARAM_GROUP(self, param_group)

    @override
    def zero_grad(self, set_to_none: bool = True) -> None:
        if "torch._dynamo" in sys.modules:
            return super().zero_grad(set_to_none)
        return _ZERO_GRAD(self, set_to_none)

    @override
    def state_dict(self) -> dict[str, Any]:
        if "torch._dynamo" in sys.modules:
            return super().state_dict()
        return _STATE_DICT(self)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "torch._dynamo" in sys.modules:
            return super().load_state_dict(state_dict)
        return _LOAD_STATE_DICT(self, state_dict)


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


def stop_rendezvous_heartbeats(handler: Any, timeout_s: float) -> None:
    """Stops a ``DynamicRendezvousHandler``'s keep-alive thread, waiting at most ``timeout_s`` for it to end.

    The rendezvous stays open: torch's public ``shutdown()`` would also close it, ending the job for the other hosts.
    torch 2.13's handler keeps a ``_PeriodicTimer`` in ``_keep_alive_timer`` (None before its first round); the
    timer's ``_ctx.stop_event`` ends its loop and ``_thread`` runs it. Its own ``cancel()`` joins without a limit,
    and a keep-alive call to an unreachable store blocks up to the store's timeout.
    """
    timer = handler._keep_alive_timer
    if timer is None:
        return
    timer._ctx.stop_event.set()
    if timer._thread is not None:
        timer._thread.join(timeout_s)
