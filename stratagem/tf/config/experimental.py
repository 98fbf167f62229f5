"""``tf.config.experimental``: memory growth, determinism, and the older spellings of ``tf.config``'s names."""

from __future__ import annotations

from typing import Any

import torch

from stratagem.data.options import warn_once
from stratagem.tf._refusal import module_getattr


def set_memory_growth(device: Any, enable: bool) -> None:
    """Accepted: torch's allocator grows on demand; ``enable=False`` warns once (torch does not preallocate)."""
    if not enable:
        warn_once("set_memory_growth", "set_memory_growth(device, False) does not preallocate GPU memory here: "
                  "torch's caching allocator always grows on demand.")


def get_memory_growth(device: Any) -> bool:
    """True: torch's allocator grows on demand."""
    return True


def get_memory_info(device: str) -> dict[str, int]:
    """``{'current': bytes, 'peak': bytes}`` from torch's CUDA allocator for ``'GPU:i'``."""
    index = int(str(device).rsplit(":", 1)[-1])
    if not torch.cuda.is_available():
        raise ValueError(f"No GPU to report memory for: torch sees no CUDA device. Received: device={device!r}")
    return {"current": torch.cuda.memory_allocated(index), "peak": torch.cuda.max_memory_allocated(index)}


def enable_op_determinism() -> None:
    """``tf.config.experimental.enable_op_determinism``: ``torch.use_deterministic_algorithms(True)``."""
    torch.use_deterministic_algorithms(True)


def disable_op_determinism() -> None:
    torch.use_deterministic_algorithms(False)


def set_synchronous_execution(enable: bool) -> None:
    warn_once("set_synchronous_execution", "set_synchronous_execution changes nothing here: torch's CPU ops run "
              "synchronously.")


# tf.config's names under their older spellings (as in TF, the same objects); tf.config imports this module, so
# they resolve on use.
_TF_CONFIG: dict[str, tuple[str, str]] = {
    **{name: ("stratagem.tf.config", name)
       for name in ("list_physical_devices", "list_logical_devices", "get_visible_devices", "set_visible_devices")},
    "set_virtual_device_configuration": ("stratagem.tf.config", "set_logical_device_configuration"),
    "VirtualDeviceConfiguration": ("stratagem.tf.config", "LogicalDeviceConfiguration"),
}
__getattr__ = module_getattr("tf.config.experimental", _TF_CONFIG)
__all__ = [
    "VirtualDeviceConfiguration", "disable_op_determinism", "enable_op_determinism", "get_memory_growth",
    "get_memory_info", "get_visible_devices", "list_logical_devices", "list_physical_devices", "set_memory_growth",
    "set_virtual_device_configuration", "set_visible_devices",
]
