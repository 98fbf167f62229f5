"""TF's runtime names that need no graph: ``tf.executing_eagerly``, ``tf.device``, ``tf.name_scope``, ``get_logger``.

``tf.device`` changes no placement (torch places a tensor with its inputs, a strategy each replica): a device other
than the CPU warns once.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

from stratagem.data.options import warn_once


def executing_eagerly() -> bool:
    """Always True: there is no graph mode here."""
    return True


@contextlib.contextmanager
def device(device_name: str | None) -> Iterator[None]:
    """``tf.device``: accepted; ops still run where torch places them (a strategy chooses each replica's device)."""
    if device_name and not re.search(r"CPU", str(device_name), re.IGNORECASE):
        warn_once("tf.device", f"tf.device({device_name!r}) does not move ops here: torch runs each op on its "
                  "inputs' device and a strategy puts each replica on its device. Move tensors with .to(device).")
    yield


class name_scope(contextlib.AbstractContextManager):  # noqa: N801 (TF's name)
    """``tf.name_scope``: accepted for its ``with`` block; names have no graph to label here."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> str:
        return f"{self.name}/"

    def __exit__(self, *exc: object) -> None:
        return None


def get_logger() -> logging.Logger:
    """``tf.get_logger``: the ``tensorflow`` logger of Python's ``logging`` (setting its level works as in TF)."""
    return logging.getLogger("tensorflow")
