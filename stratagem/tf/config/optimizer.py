"""``tf.config.optimizer``: TF's graph-optimizer switches, accepted with one warning (there is no graph here)."""

from __future__ import annotations

from typing import Any

from stratagem.data.options import warn_once
from stratagem.tf._refusal import module_getattr


def set_jit(enabled: Any) -> None:
    """Accepted with one warning: XLA does not exist here; ``torch.compile`` is the user's own choice."""
    if enabled:
        warn_once("set_jit", "tf.config.optimizer.set_jit changes nothing here: there is no XLA; ops run eagerly "
                  "on torch (wrap a model in torch.compile yourself to compile it).")


def get_jit() -> str:
    return ""


def set_experimental_options(options: dict[str, Any]) -> None:
    warn_once("set_experimental_options", "tf.config.optimizer.set_experimental_options changes nothing here: "
              "TF's graph optimizer (Grappler) does not exist on torch.")


def get_experimental_options() -> dict[str, Any]:
    return {}


__getattr__ = module_getattr("tf.config.optimizer")
__all__ = ["get_experimental_options", "get_jit", "set_experimental_options", "set_jit"]
