"""``tf.config``: the devices torch sees, answered truthfully, and TF's device settings mapped or declined.

A CPU is always listed; GPUs are torch's CUDA devices. A setting with no meaning on torch warns once; one torch already
follows (memory growth) is accepted silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from stratagem.data.options import warn_once
from stratagem.tf._refusal import module_getattr
from stratagem.tf.config import experimental, optimizer, threading


class PhysicalDevice(NamedTuple):
    """``tf.config.PhysicalDevice``: ``name`` like ``/physical_device:GPU:0`` and ``device_type``."""

    name: str
    device_type: str


class LogicalDevice(NamedTuple):
    """``tf.config.LogicalDevice``: ``name`` like ``/device:GPU:0`` and ``device_type``."""

    name: str
    device_type: str


class LogicalDeviceConfiguration(NamedTuple):
    """``tf.config.LogicalDeviceConfiguration``: accepted by ``set_logical_device_configuration`` (see there)."""

    memory_limit: int | None = None
    experimental_priority: int | None = None
    experimental_device_ordinal: int | None = None


def _devices(device_type: str | None) -> list[tuple[str, int]]:
    """``(type, index)`` of each device torch sees: one CPU and the CUDA GPUs, of ``device_type`` (any if None)."""
    kind = None if device_type is None else device_type.upper()
    if kind not in (None, "CPU", "GPU", "TPU"):
        raise ValueError(f"device_type must be 'CPU', 'GPU' or 'TPU'. Received: device_type={device_type!r}")
    counts = {"CPU": 1, "GPU": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    return [(k, i) for k, n in counts.items() if kind in (None, k) for i in range(n)]


def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """``tf.config.list_physical_devices``: the CPU and torch's CUDA GPUs (never a TPU: torch has none here)."""
    return [PhysicalDevice(f"/physical_device:{k}:{i}", k) for k, i in _devices(device_type)]


def list_logical_devices(device_type: str | None = None) -> list[LogicalDevice]:
    """``tf.config.list_logical_devices``: one logical device per physical one (no virtual devices here)."""
    return [LogicalDevice(f"/device:{k}:{i}", k) for k, i in _devices(device_type)]


def get_visible_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    return list_physical_devices(device_type)


def set_visible_devices(devices: PhysicalDevice | Sequence[PhysicalDevice], device_type: str | None = None) -> None:
    """Accepted with one warning: torch fixes its visible GPUs when CUDA starts; set ``CUDA_VISIBLE_DEVICES`` before."""
    warn_once("set_visible_devices", "tf.config.set_visible_devices changes nothing here: torch reads the visible "
              "GPUs once, from CUDA_VISIBLE_DEVICES, when CUDA starts. Set CUDA_VISIBLE_DEVICES before starting "
              "the program (stratagem run sets one GPU per replica).")


def get_logical_device_configuration(device: PhysicalDevice) -> None:
    return None


def set_logical_device_configuration(device: PhysicalDevice, logical_devices: Sequence[Any] | None) -> None:
    """Accepted with one warning: virtual devices do not exist here; a replica is a process (``stratagem run -n N``)."""
    warn_once("set_logical_device_configuration", "tf.config.set_logical_device_configuration makes no virtual "
              "devices here: each replica is its own process. Run N replicas on one machine with `stratagem run "
              "-n N script.py` (or MirroredStrategy(num_replicas=N)); memory limits are not applied.")


def set_soft_device_placement(enabled: bool) -> None:
    """Accepted: torch never places an op on a device it cannot run on, which is what soft placement allows for."""


def get_soft_device_placement() -> bool:
    return True


def run_functions_eagerly(run_eagerly: bool) -> None:
    """Accepted: ``tf.function`` always runs its Python function eagerly here."""


def functions_run_eagerly() -> bool:
    return True


__getattr__ = module_getattr("tf.config")
__all__ = [
    "LogicalDevice", "LogicalDeviceConfiguration", "PhysicalDevice", "experimental", "functions_run_eagerly",
    "get_logical_device_configuration", "get_soft_device_placement", "get_visible_devices", "list_logical_devices",
    "list_physical_devices", "optimizer", "run_functions_eagerly", "set_logical_device_configuration",
    "set_soft_device_placement", "set_visible_devices", "threading",
]
