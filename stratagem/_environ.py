"""Numbers read from environment variables: one parser, one error message, for every knob that is a number.

The launcher's contract for ``RANK``, ``WORLD_SIZE`` and the like is read in ``stratagem.distribute._cluster_spec``
(required values with a fix per variable); this module is for optional tuning knobs that have a default.
"""

from __future__ import annotations

import os
from typing import TypeVar

Number = TypeVar("Number", int, float)


def number_from_env(name: str, default: Number, *, meaning: str, zero_allowed: bool = False) -> Number:
    """The value of environment variable ``name`` as the type of ``default`` (int or float); ``default`` if unset.

    Raises:
        ValueError: the text is not such a number, is negative, or is 0 where ``zero_allowed`` is False; the message
            says what ``name`` means.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value: Number | None = type(default)(raw)
    except ValueError:
        value = None
    if value is None or value < 0 or (value == 0 and not zero_allowed):
        kind = "a whole number" if isinstance(default, int) else "a number"
        bound = "0 or more" if zero_allowed else "above 0"
        raise ValueError(f"{name} is {meaning}: {kind}, {bound}. Received: {name}={raw!r}")
    return value
