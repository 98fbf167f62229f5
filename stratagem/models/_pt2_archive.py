"""The ``model.pt2`` check: ``check_archive`` refuses any archive ``torch.export.load`` could run code from.

``torch.export.load`` is NOT safe on a crafted file: it unpickles sample inputs (again with ``weights_only=False``
if that fails), ``use_pickle`` weights and constants, torchbind and opaque constants; it loads AOTInductor shared
libraries; it ``sympify``s (``eval``) shape expressions; it resolves node targets by attribute lookup from
``torch``, ``operator`` and ``math`` (``torch.os.system`` is one); it ``exec``s ``guards_code``; it pastes names
from the file into generated source; its pytree specs may import any module. So ``check_archive`` takes the bytes,
already in memory, and accepts only: the entries ``save_model`` writes, an empty sample-inputs entry, no pickled
payloads, ATen operator targets (minus file I/O) or symbolic-int arithmetic, shape expressions of numbers, symbols
and torch's sympy functions, no guards code, pytree specs of tuples, lists and dicts, and every other string a plain
name (``[A-Za-z0-9_.]``). It is about code execution: a crafted file can still ask for huge tensors, or aim at
torch's C++ zip reader. The folder's I/O lives in ``saving.py``; torch 2.13's layout names in ``_torch_internals``.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from stratagem._torch_internals import (
    PT2_ENTRY, PT2_REQUIRED, PT2_SHAPE_FUNCTIONS, PT2_SYMBOLIC_TARGETS, is_aten_overload,
)
from stratagem.errors import CheckpointError

_PLAIN = re.compile(r"[A-Za-z0-9_.]*")
_VERSION = re.compile(r"[A-Za-z0-9_.+-]*")
_ATEN_TARGET = re.compile(r"torch\.ops\.aten\.(?P<op>(?!__)[A-Za-z_]\w*)\.(?P<overload>(?!__)[A-Za-z_]\w*)")
_IO_OPS = frozenset({"save", "from_file", "_print"})  # ATen operators that touch files or stdout
_SYMBOL_CALL = re.compile(r"Symbol\('[a-z]{1,3}\d+'(?:, [a-z]+=(?:True|False))*\)")
_EXPRESSION_TOKEN = re.compile(r"\s*(?:\d+(?:\.\d+)?|(?P<name>[A-Za-z_]\w*)|//|[-+*/%(),])")
_TREE_TYPES = (None, "builtins.tuple", "builtins.list", "builtins.dict")


def check_archive(raw: bytes, path: Path) -> None:
    """Raises ``CheckpointError`` unless ``torch.export.load`` can read ``raw`` without running code from it."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            infos = archive.infolist()
            prefix = infos[0].filename.split("/", 1)[0] + "/" if infos else ""
            names = {info.filename.removeprefix(prefix): info for info in infos if info.filename.startswith(prefix)}
            problem = _entries_problem(names, len(infos))
            if problem is None:
                documents = [json.loads(archive.read(prefix + name)) for name in PT2_REQUIRED if name.endswith(".json")]
                problem = next(filter(None, (_strings_problem(document) for document in documents)), None)
                problem = problem or _payloads_problem(documents[1]) or _payloads_problem(documents[2])
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError, RecursionError, OSError, EOFError) as err:
        raise CheckpointError(f"Cannot load {str(path)!r}: it is truncated or corrupt. Re-save the model. "
                              f"Received: {type(err).__name__}: {str(err)[:200]}") from err
    if problem is not None:
        raise CheckpointError(f"Refused to load {str(path)!r}: {problem}. It was not written by save_model; "
                              f"load only models from sources you trust. Received: path={str(path)!r}")


def _entries_problem(names: dict[str, zipfile.ZipInfo], num_entries: int) -> str | None:
    if len(names) != num_entries:
        return "its entries are not all in one folder, or some appear twice"
    unexpected = sorted(name for name in names if not PT2_ENTRY.fullmatch(name))
    if unexpected:
        return f"it holds unexpected entries {unexpected[:5]} (pickles, libraries or other data)"
    missing = [name for name in PT2_REQUIRED if name not in names]
    if missing:
        return f"it lacks the entries {missing}"
    if names["data/sample_inputs/model.pt"].file_size != 0:
        return "it holds pickled sample inputs, which would run code when loaded"
    return None


def _payloads_problem(config: Any) -> str | None:
    """Weights and constants must be raw tensor bytes, never pickles."""
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        return "a weights or constants config is malformed"
    for name, meta in entries.items():
        if not isinstance(meta, dict) or meta.get("use_pickle") is not False:
            return f"{name!r} is stored as a pickle, which would run code when loaded"
        if not re.fullmatch(r"(?:weight|tensor)_\d+", str(meta.get("path_name"))):
            return f"{name!r} is stored as a {meta.get('path_name')!r} payload, not a plain tensor"
    return None


def _strings_problem(document: Any) -> str | None:
    for key, text in _strings(document):
        check = _STRING_CHECKS.get(key, _PLAIN.fullmatch)
        if not check(text):
            return f"it holds {key or 'the name'} {text[:80]!r}, which loading would run or paste into code"
    return None


def _strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a parsed JSON document with the key it sits under; dict keys come as ``("", key)``."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield "", name
            yield from _strings(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)


def _is_allowed_target(text: str) -> bool:
    if text in PT2_SYMBOLIC_TARGETS:
        return True
    match = _ATEN_TARGET.fullmatch(text)
    if match is None or match["op"] in _IO_OPS:
        return False
    try:
        overload = getattr(getattr(torch.ops.aten, match["op"]), match["overload"])
    except (AttributeError, RuntimeError):
        return False
    return is_aten_overload(overload)


def _is_plain_expression(text: str) -> bool:
    """Numbers, symbols and torch's sympy functions only: ``sympy.sympify`` ``eval``s this string."""
    text = _SYMBOL_CALL.sub("s0", text)
    if len(text) > 2000 or "**" in text:
        return False
    position = 0
    while text[position:].strip():
        token = _EXPRESSION_TOKEN.match(text, position)
        if token is None:
            return False
        name = token["name"]
        if name is not None and name not in PT2_SHAPE_FUNCTIONS and not re.fullmatch(r"[a-z]{1,3}\d+", name):
            return False
        position = token.end()
    return True


def _is_plain_treespec(text: str) -> bool:
    """Tuples, lists and dicts only: pytree would import any module an ``__enum__`` context names."""
    try:
        protocol, node = json.loads(text)
    except (ValueError, TypeError):
        return False
    return isinstance(protocol, int) and _is_plain_tree_node(node)


def _is_plain_tree_node(node: Any) -> bool:
    if not isinstance(node, dict) or node.get("type") not in _TREE_TYPES:
        return False
    if not isinstance(node.get("children_spec"), list):
        return False
    context = node.get("context")
    if context is not None:
        try:
            keys = json.loads(context) if isinstance(context, str) else context
        except ValueError:
            return False
        if keys is not None and not (isinstance(keys, list) and all(isinstance(k, (str, int)) for k in keys)):
            return False
    return all(_is_plain_tree_node(child) for child in node["children_spec"])


_STRING_CHECKS: dict[str, Callable[[str], object]] = {
    "target": _is_allowed_target,
    "as_operator": _is_allowed_target,
    "expr_str": _is_plain_expression,
    "in_spec": _is_plain_treespec,
    "out_spec": _is_plain_treespec,
    "as_string": lambda text: True,  # operator arguments: generated code holds repr(text)
    "as_strings": lambda text: True,
    "torch_version": _VERSION.fullmatch,
    "guards_code": lambda text: False,  # exec'd by ExportedProgram.module()
}
