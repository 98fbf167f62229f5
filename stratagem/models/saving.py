"""Whole-model saving: ``Model.save`` and ``load_model`` (Keras' names), on ``torch.export``.

``save_model`` writes a folder that loads without the model's Python class: ``weights.safetensors``, ``model.pt2``
(exported on CPU in eval mode with a dynamic batch axis) and ``metadata.json``; built under a temporary name and
renamed into place, so a crash leaves the previous save, never half of one. ``load_model`` parses the data formats
(JSON, safetensors), and reads ``model.pt2`` into memory once and checks those bytes
(``_pt2_archive.check_archive``) before ``torch.export.load``, which is not safe on a crafted file; the program's
weights are then replaced by the safetensors ones. ``save_model`` runs the same check on what it wrote, so a save
never yields a folder ``load_model`` refuses. Training checkpoints are not here (``save_weights``,
``stratagem.checkpoint``).
"""

from __future__ import annotations

import copy
import io
import json
import os
import platform
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from stratagem._nest import batch_size_of, map_structure
from stratagem._torch_internals import drop_guards_code
from stratagem.checkpoint import io as checkpoint_io
from stratagem.errors import CheckpointError
from stratagem.models._pt2_archive import check_archive

if TYPE_CHECKING:
    from stratagem.models.model import Model

__all__ = ["LoadedModel", "TensorSpec", "input_spec_of", "load_model", "save_model"]

FORMAT_VERSION = 1
WEIGHTS_FILE = checkpoint_io.MODEL_WEIGHTS_FILE
PROGRAM_FILE = "model.pt2"
METADATA_FILE = "metadata.json"
_DEFAULT_BATCH_SIZE = 32  # Model.predict's default
# Node metadata of free text (source paths and lines): not needed to run, so not saved.
_FREE_TEXT_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "from_node", "custom")


@dataclass(frozen=True)
class TensorSpec:
    """The shape (without the batch axis) and torch dtype of one model input."""

    shape: tuple[int, ...]
    dtype: torch.dtype


InputSpec = Any  # a TensorSpec, or a tuple/list/dict of them shaped like the model's x


def input_spec_of(x: Any) -> InputSpec | None:
    """The ``TensorSpec`` structure of a batch ``x``; None if ``x`` is not tensors with a batch axis."""
    leaves: list[TensorSpec | None] = []

    def describe(value: Any) -> TensorSpec | None:
        tensor = _numpy_to_tensor(value) if isinstance(value, np.ndarray) else value
        has_batch_axis = isinstance(tensor, torch.Tensor) and tensor.ndim > 0
        leaves.append(TensorSpec(tuple(int(d) for d in tensor.shape[1:]), tensor.dtype) if has_batch_axis else None)
        return leaves[-1]

    spec = map_structure(describe, x)
    return spec if leaves and all(leaves) else None


def save_model(model: Model, filepath: str | os.PathLike[str], *, input_example: Any = None) -> None:
    """Saves ``model`` as a folder that loads without its Python class (``keras.saving.save_model``).

    Input shapes come from the first batch the model saw, or from ``input_example``. Only the chief writes; other
    replicas return at once, so load only after the chief has finished. An earlier save at ``filepath`` is replaced
    atomically; anything else there is never overwritten.

    Args:
        model: The model to save.
        filepath: The folder to write.
        input_example: A batch ``x`` (arrays or tensors), if the model has seen none.

    Raises:
        ValueError: If no input shapes are known, or ``filepath`` holds something else.

    Example:
        >>> model.save("saved/mnist")  # doctest: +SKIP
        >>> stratagem.models.load_model("saved/mnist").predict(x_test)  # doctest: +SKIP
    """
    spec = input_spec_of(input_example) if input_example is not None else getattr(model, "_input_spec", None)
    if spec is None:
        raise ValueError(
            "save needs the shape of the model's inputs, and the model has not seen any. Call the model on "
            "data first (fit, evaluate, predict or model(x)), or pass input_example=x (a batch of arrays or "
            f"tensors). Received: input_example of type {type(input_example).__name__}")
    # Only the chief writes: every replica holds the same weights, and several writers renaming onto one folder would
    # race.
    if model.distribute_strategy.is_chief:
        _write_atomically(model, spec, Path(filepath))


def load_model(filepath: str | os.PathLike[str]) -> LoadedModel:
    """Loads a folder written by ``Model.save`` into a ``LoadedModel``, without the model's Python class.

    Never runs code from the folder (the module docstring says what is read, and how).

    Args:
        filepath: The folder ``Model.save`` wrote.

    Raises:
        CheckpointError: If a file is missing, corrupt, of another format version, or holds anything that could run
            code; the message names the file.

    Example:
        >>> loaded = stratagem.models.load_model("saved/mnist")  # doctest: +SKIP
        >>> loaded.predict(x_test, batch_size=64).argmax(axis=1)  # doctest: +SKIP
    """
    folder = Path(filepath)
    if not folder.is_dir():
        raise CheckpointError(
            f"No saved model at {str(folder)!r}: the folder does not exist. Save one with model.save(path). "
            f"Received: filepath={str(folder)!r}")
    metadata = _read_metadata(folder / METADATA_FILE)
    try:
        spec = _decode_spec(metadata["input_spec"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(f"{str(folder / METADATA_FILE)!r} has no valid input_spec. Re-save the model. "
                              f"Received: {err!r}") from err
    program = _read_program(folder / PROGRAM_FILE, metadata)
    weights_path = folder / WEIGHTS_FILE
    _apply_weights(program, checkpoint_io.load_state(weights_path), weights_path)
    return LoadedModel(program, metadata, spec)


class LoadedModel:
    """A model read back by ``load_model``: inference on CPU, no Python class needed.

    Args:
        program: The ``torch.export`` program, holding the weights of ``weights.safetensors``.
        metadata: The parsed ``metadata.json``.
        input_spec: The ``TensorSpec`` structure of one batch ``x``.

    Example:
        >>> loaded = stratagem.models.load_model("saved/mnist")  # doctest: +SKIP
        >>> logits = loaded(torch.zeros(4, 1, 28, 28))  # doctest: +SKIP
    """

    def __init__(self, program: torch.export.ExportedProgram, metadata: dict[str, Any], input_spec: InputSpec) -> None:
        self.program = program
        self.module = program.module()
        self.metadata = metadata
        self.input_spec = input_spec

    def __call__(self, x: Any) -> Any:
        """Runs the model on one batch ``x`` (tensors or arrays shaped like ``input_spec``)."""
        return self.module(_inputs_for(x, self.input_spec))

    def predict(self, x: Any, batch_size: int | None = None) -> Any:
        """The outputs for every example as numpy arrays (a structure of them for several outputs).

        Args:
            x: Arrays or tensors (or a tuple/list/dict of them) shaped like ``input_spec``; float inputs are cast to the
                saved dtype.
            batch_size: Examples per batch (default 32).

        Example:
            >>> loaded.predict(np.zeros((10, 1, 28, 28), np.float32), batch_size=4).shape  # doctest: +SKIP
            (10, 10)
        """
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer. Received: batch_size={batch_size}")
        inputs = _inputs_for(x, self.input_spec)
        batch_size = batch_size or _DEFAULT_BATCH_SIZE
        num_samples = batch_size_of(inputs)
        if num_samples == 0:
            raise ValueError("predict received no batches: the input is empty")
        outputs = []
        with torch.no_grad():
            for start in range(0, num_samples, batch_size):
                # NOTE: rows are gathered with an index tensor, as Model.predict does, so every kernel sees the same
                # memory layout and the results match bit for bit.
                rows = torch.arange(start, min(start + batch_size, num_samples))
                outputs.append(self.module(map_structure(lambda t: t[rows], inputs)))
        return _concatenate(outputs)


# ---- writing -----------------------------------------------------------------------
def _write_atomically(model: Model, spec: InputSpec, target: Path) -> None:
    """Writes the folder under a temporary name, then renames it to ``target``."""
    _check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{target}.tmp-{secrets.token_hex(8)}")
    os.mkdir(tmp)
    started = os.stat(tmp).st_mtime_ns
    try:
        _write_folder(model, spec, tmp)
        for hook in checkpoint_io._BEFORE_RENAME_HOOK:  # tests inject a crash between write and rename
            hook(str(tmp))
        checkpoint_io.replace_folder(tmp, target, started_ns=started)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        checkpoint_io.raise_if_disk_full(err, target)
        raise


def _write_folder(model: Model, spec: InputSpec, folder: Path) -> None:
    """Writes the three files into ``folder`` and flushes them to disk."""
    from safetensors.torch import save_file

    # copy=True: safetensors refuses tensors that share memory (tied weights).
    state = {key: t.detach().to("cpu", copy=True).contiguous() for key, t in model.module.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE))
    torch.export.save(_export(model.module, spec), str(folder / PROGRAM_FILE))
    try:
        check_archive((folder / PROGRAM_FILE).read_bytes(), folder / PROGRAM_FILE)
    except CheckpointError as err:  # torch wrote something this loader does not accept
        raise CheckpointError(f"save_model wrote a program that load_model would refuse "
                              f"(torch {torch.__version__}). {err}") from err
    (folder / METADATA_FILE).write_text(json.dumps(_metadata(model, spec), indent=2, sort_keys=True), encoding="utf-8")
    for path in (folder / WEIGHTS_FILE, folder / PROGRAM_FILE, folder / METADATA_FILE, folder):
        checkpoint_io.fsync_path(path)  # on disk before the folder is renamed into place


def _export(module: nn.Module, spec: InputSpec) -> torch.export.ExportedProgram:
    """Exports a CPU, eval-mode copy of ``module`` with a dynamic batch axis."""
    # A copy: the user's module keeps its device and train/eval flag. Eval mode makes the program compute what
    # Model.predict computes (dropout off, batch norm on running stats).
    module = copy.deepcopy(module).to("cpu").eval()
    spec = _sorted_keys(spec)
    # Batch 2, not 1: torch.export specializes axes of size 0 and 1.
    example = map_structure(lambda s: torch.zeros((2, *s.shape), dtype=s.dtype), spec)
    batch = torch.export.Dim("batch")
    dynamic_shapes = (map_structure(lambda _: {0: batch}, spec),)
    program = torch.export.export(module, (example,), dynamic_shapes=dynamic_shapes)
    program.example_inputs = None  # loading would unpickle them; we save none and refuse any
    # NOTE: guards are Python source that ExportedProgram.module() exec's when sample inputs are saved. Without sample
    # inputs they are never used, so we save none and refuse any.
    drop_guards_code(program)
    for node in program.graph.nodes:
        for key in _FREE_TEXT_META:
            node.meta.pop(key, None)
    return program


def _metadata(model: Model, spec: InputSpec) -> dict[str, Any]:
    from stratagem._version import __version__
    from stratagem.optimizers import TorchOptimizer

    compile_config = None
    if model.compiled_metrics is not None:
        optimizer = model.optimizer
        if optimizer is not None:
            wrapped = optimizer.torch_optimizer if isinstance(optimizer, TorchOptimizer) else optimizer
            optimizer_config = {"class_name": type(wrapped).__name__, "learning_rate": optimizer.learning_rate}
        compile_config = {
            "optimizer": optimizer_config if optimizer is not None else None,
            "loss": model.compiled_loss.name if model.compiled_loss is not None else None,
            "metrics": [metric.name for metric in model.compiled_metrics.metrics],
        }
    return {
        "format_version": FORMAT_VERSION,
        "name": model.name,
        "input_spec": _encode_spec(spec),
        "compile_config": compile_config,
        "versions": {"stratagem": __version__, "torch": torch.__version__,
                     "python": platform.python_version()},
    }


def _check_replaceable(target: Path) -> None:
    """Refuses to replace anything but an earlier save or an empty folder: its contents would be lost."""
    if not os.path.lexists(target):
        return
    is_folder = target.is_dir() and not target.is_symlink()
    if is_folder and ((target / METADATA_FILE).is_file() or not any(target.iterdir())):
        return
    raise ValueError(
        f"{str(target)!r} exists and is not a model saved by save_model, so it was not replaced (its contents "
        f"would be lost). Pass a new path, or remove it first. Received: filepath={str(target)!r}")


# ---- reading -----------------------------------------------------------------------
def _missing(path: Path) -> CheckpointError:
    return CheckpointError(f"Saved model file {str(path)!r} is missing. Re-save the model. "
                           f"Received: path={str(path)!r}")


def _read_metadata(path: Path) -> dict[str, Any]:
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise _missing(path) from err
    except (OSError, ValueError) as err:
        raise CheckpointError(f"Cannot read {str(path)!r}: it is truncated or corrupt. Re-save the model. "
                              f"Received: {type(err).__name__}: {str(err)[:200]}") from err
    version = metadata.get("format_version") if isinstance(metadata, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{str(path)!r} has a format version this stratagem cannot read. Load it with the stratagem that "
            f"saved it, or re-save the model. Received: format_version={version!r}, expected {FORMAT_VERSION}")
    return metadata


def _read_program(path: Path, metadata: dict[str, Any]) -> torch.export.ExportedProgram:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as err:
        raise _missing(path) from err
    check_archive(raw, path)
    try:
        return torch.export.load(io.BytesIO(raw))  # the checked bytes, never the file again
    except Exception as err:  # every failure to read is the same problem for the caller
        versions = metadata.get("versions")
        saved = versions.get("torch") if isinstance(versions, dict) else None
        raise CheckpointError(
            f"Cannot load {str(path)!r}: torch.export could not read it (saved with torch {saved}, this is torch "
            f"{torch.__version__}). Re-save the model with this torch. Received: {type(err).__name__}: {str(err)[:200]}"
        ) from err


def _apply_weights(program: torch.export.ExportedProgram, weights: dict[str, Any], path: Path) -> None:
    """Replaces the program's weights with those of ``weights.safetensors``, checking that each fits."""
    state = program.state_dict
    for name, current in state.items():
        tensor = weights.get(name)
        if not isinstance(tensor, torch.Tensor) or tensor.shape != current.shape or tensor.dtype != current.dtype:
            received = "missing" if tensor is None else f"{tuple(tensor.shape)} {tensor.dtype}"
            raise CheckpointError(
                f"{str(path)!r} does not fit model.pt2: {name!r} must be {tuple(current.shape)} {current.dtype}. "
                f"Re-save the model. Received: {name}={received}")
        state[name] = nn.Parameter(tensor, requires_grad=False) if isinstance(current, nn.Parameter) else tensor


def _encode_spec(spec: InputSpec) -> dict[str, Any]:
    if isinstance(spec, TensorSpec):
        return {"shape": list(spec.shape), "dtype": str(spec.dtype).removeprefix("torch.")}
    if isinstance(spec, dict):
        return {"dict": {str(key): _encode_spec(value) for key, value in spec.items()}}
    return {type(spec).__name__: [_encode_spec(value) for value in spec]}  # "tuple" or "list"


def _sorted_keys(spec: InputSpec) -> InputSpec:
    """``spec`` with dict keys sorted, as metadata.json (which load_model rebuilds inputs from) stores them."""
    if isinstance(spec, dict):
        return {key: _sorted_keys(spec[key]) for key in sorted(spec)}
    if isinstance(spec, (tuple, list)):
        return type(spec)(_sorted_keys(value) for value in spec)
    return spec


def _decode_spec(encoded: dict[str, Any]) -> InputSpec:
    if "shape" in encoded:
        name = str(encoded["dtype"])
        dtype = getattr(torch, name, None) if re.fullmatch(r"[a-z][a-z0-9_]*", name) else None
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {encoded['dtype']!r}")
        return TensorSpec(tuple(int(d) for d in encoded["shape"]), dtype)
    if "dict" in encoded:
        return {key: _decode_spec(value) for key, value in encoded["dict"].items()}
    if "tuple" in encoded or "list" in encoded:
        kind = tuple if "tuple" in encoded else list
        return kind(_decode_spec(value) for value in encoded[kind.__name__])
    raise ValueError(f"unknown input_spec entry {encoded!r}")


def _numpy_to_tensor(value: np.ndarray) -> torch.Tensor:
    # The conversion Model.predict applies to arrays (float -> the default float dtype).
    tensor = torch.from_numpy(np.ascontiguousarray(value))
    return tensor.to(torch.get_default_dtype()) if tensor.is_floating_point() else tensor


def _inputs_for(x: Any, spec: InputSpec) -> Any:
    """``x`` as tensors shaped like ``spec``, float inputs cast to the saved dtype."""
    if isinstance(spec, TensorSpec):
        return _input_tensor(x, spec)
    if isinstance(spec, dict) and isinstance(x, dict) and set(x) == set(spec):
        return {key: _inputs_for(x[key], value) for key, value in spec.items()}
    if isinstance(spec, (tuple, list)) and isinstance(x, (tuple, list)) and len(x) == len(spec):
        return type(spec)(_inputs_for(value, item) for value, item in zip(x, spec))
    raise ValueError(f"x must have the structure the model was saved with: {spec}. "
                     f"Received: x of type {type(x).__name__}")


def _input_tensor(x: Any, spec: TensorSpec) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"Inputs must be numpy arrays or tensors. Received: x of type {type(x).__name__}")
    if tensor.is_floating_point() and spec.dtype.is_floating_point:
        tensor = tensor.to(spec.dtype)
    if tuple(tensor.shape[1:]) != spec.shape or tensor.dtype != spec.dtype:
        raise ValueError(f"Each input must be a batch of examples of shape {spec.shape} and dtype {spec.dtype}, "
                         f"as when the model was saved. Received: shape={tuple(tensor.shape)}, dtype={tensor.dtype}")
    return tensor


def _concatenate(outputs: list[Any]) -> Any:
    """Joins per-batch outputs into numpy arrays, as Model.predict does (several outputs: each one)."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(outputs).cpu().numpy()
    if isinstance(first, dict):
        return {key: _concatenate([output[key] for output in outputs]) for key in first}
    return type(first)(_concatenate([output[i] for output in outputs]) for i in range(len(first)))
