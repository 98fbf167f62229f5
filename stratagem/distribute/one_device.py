"""``OneDeviceStrategy``: one replica on one device; also the default strategy."""

from __future__ import annotations

import torch
from torch import nn
from typing_extensions import override

from stratagem.distribute.input_context import InputContext
from stratagem.distribute.strategy import Strategy
from stratagem.distribute.values import ReduceOp


class OneDeviceStrategy(Strategy):
    """Runs everything on one device, with no process group.

    Args:
        device: Where to compute, e.g. ``"cpu"``, ``"cuda:0"`` or TF's ``"/gpu:0"``.

    Example:
        >>> strategy = OneDeviceStrategy("cpu")
        >>> strategy.num_replicas_in_sync
        1
    """

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self._requested_device = parse_device(device)
        super().__init__()

    @override
    def _setup(self) -> None:
        self._device = self._requested_device

    @override
    def _wrap_module(self, module: nn.Module) -> nn.Module:
        return module.to(self._device)

    @override
    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp) -> torch.Tensor:
        return tensor

    @override
    def _input_context(self) -> InputContext:
        return InputContext()


def parse_device(device: str | torch.device) -> torch.device:
    """Accepts torch names (``"cuda:1"``) and TF names (``"/gpu:1"``, ``"/job:x/device:CPU:0"``)."""
    if isinstance(device, torch.device):
        return device
    name = str(device).strip().lower().rsplit("/", 1)[-1]
    name = name.removeprefix("device:")
    kind, _, index = name.partition(":")
    kind = {"gpu": "cuda"}.get(kind, kind)
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(
            f"Unknown device. Expected 'cpu', 'cuda[:i]', '/gpu:i' or '/cpu:0'. Received: device={device!r}")
    if kind == "cpu":
        return torch.device("cpu")
    return torch.device(kind, int(index)) if index else torch.device(kind)


def replica_device(local_rank: int) -> torch.device:
    """The default device of the replica with this local rank: its GPU if there are GPUs, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")
