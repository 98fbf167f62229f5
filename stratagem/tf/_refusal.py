"""The one place that words a refusal for a TensorFlow name stratagem does not provide."""

from __future__ import annotations

# `tf.<path>` -> what to use instead, or why it cannot exist here. Owners of each namespace add their entries.
ALTERNATIVES: dict[str, str] = {}


def missing_name(namespace: str, name: str) -> AttributeError:
    """The ``AttributeError`` for ``<namespace>.<name>``: names it and the stratagem way, or says it is not provided."""
    path = f"{namespace}.{name}"
    hint = ALTERNATIVES.get(path)
    if hint is None:
        hint = "stratagem.tf does not provide it; see the README section 'TensorFlow code' for what it does provide"
    return AttributeError(f"module 'stratagem.tf' has no attribute {path!r}: {hint}")
