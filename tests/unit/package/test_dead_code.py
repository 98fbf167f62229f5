"""Every function, method and class in stratagem/ is used somewhere (or is public API)."""

from __future__ import annotations

import ast
import collections
import re

from tests.unit.package._source import ROOT, modules

# Names that are called by a framework rather than by name in our code.
_CALLED_BY_FRAMEWORK = re.compile(r"^(__\w+__|on_\w+|test_\w+|setUp|tearDown|forward|main)$")


def _definitions() -> list[tuple[str, str]]:
    found = []
    for module, tree in modules():
        exported: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                exported |= {elt.value for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                decorators = {ast.unparse(d) for d in node.decorator_list}
                if node.name in exported or "override" in decorators or _is_rpc_handler(node):
                    continue
                found.append((module, node.name))
    return found


def _is_rpc_handler(node: ast.AST) -> bool:
    """gRPC handlers are looked up by method name (``_create`` serves ``Create``)."""
    args = [a.arg for a in getattr(getattr(node, "args", None), "args", [])]
    return args == ["self", "request", "context"]


def _corpus() -> str:
    texts = []
    for folder in ("stratagem", "tests", "bench", "examples"):
        texts += [p.read_text(encoding="utf-8") for p in (ROOT / folder).rglob("*.py")]
    return "\n".join(texts)


def test_every_definition_is_referenced_somewhere() -> None:
    words = collections.Counter(re.findall(r"\w+", _corpus()))
    unused = []
    for module, name in _definitions():
        if _CALLED_BY_FRAMEWORK.match(name):
            continue
        # Defined once; any second mention (a call, an attribute, an export) is a use.
        if words[name] < 2:
            unused.append(f"{module}.{name}")
    assert not unused, f"defined but never used (delete, or export in __all__): {unused}"
