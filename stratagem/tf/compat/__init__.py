"""``tf.compat``: ``v1`` (TF 1 names: the TF 2 ones, plus refusals of graph mode) and ``v2`` (``stratagem.tf``)."""

from __future__ import annotations

import importlib
from typing import Any

from stratagem.tf._refusal import missing_name


def __getattr__(name: str) -> Any:
    if name == "v1":
        return importlib.import_module("stratagem.tf.compat.v1")
    if name == "v2":
        return importlib.import_module("stratagem.tf")
    raise missing_name("tf.compat", name)


def __dir__() -> list[str]:
    return ["v1", "v2"]
