"""Reads the package's source for the structure tests (no imports of the code under test)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "stratagem"


def modules() -> Iterator[tuple[str, ast.Module]]:
    """(dotted module name, parsed tree) of every module of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported_modules(tree: ast.Module) -> Iterator[str]:
    """Every stratagem module a tree imports when it runs, at top level or inside functions.

    Imports under ``if TYPE_CHECKING:`` never run: they name the types of signatures (a callback's
    ``model: Model``), which may point anywhere without making the layers depend on each other.
    """
    type_only = {id(inner) for node in ast.walk(tree)
                 if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                 for statement in node.body for inner in ast.walk(statement)}
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from stratagem import x` uses stratagem.x (a submodule or one of its names).
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
