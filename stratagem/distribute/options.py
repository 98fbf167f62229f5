"""``CommunicationOptions``: how the replicas of a synchronous strategy talk (TF's names, torch's settings)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from stratagem._environ import number_from_env
from stratagem.distribute.compression import parse_compression
from stratagem.distribute.values import parse_enum

DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_ENV = "STRATAGEM_TIMEOUT_S"


class CommunicationImplementation(str, enum.Enum):
    """Collective backend: ``AUTO`` picks NCCL on CUDA devices and gloo elsewhere."""

    AUTO = "auto"
    RING = "ring"  # gloo's ring all-reduce, on CPU tensors
    NCCL = "nccl"


@dataclass(frozen=True)
class CommunicationOptions:
    """Options for the collectives of ``MirroredStrategy`` and ``MultiWorkerMirroredStrategy``.

    Args:
        bytes_per_pack: Size of the gradient buckets all-reduced together (DDP's ``bucket_cap_mb``); 0 keeps DDP's
            25 MB.
        timeout_seconds: How long a rendezvous or collective may wait for a peer before ``CollectiveTimeoutError``;
            ``None`` reads ``STRATAGEM_TIMEOUT_S`` (the launcher's ``--timeout``), else 300 s.
        implementation: ``"auto"``, ``"ring"`` (gloo) or ``"nccl"``.
        compression: How gradients travel (an extension; TF has none): ``None`` (float32), ``"bf16"``, ``"fp16"``,
            or ``PowerSGD(rank)``, through DDP hooks that still SUM over the global batch, so only rounding differs.
            ``MirroredStrategy`` and ``MultiWorkerMirroredStrategy`` only.

    Example:
        >>> options = CommunicationOptions(timeout_seconds=30, compression="bf16")
        >>> strategy = MultiWorkerMirroredStrategy(communication_options=options)  # doctest: +SKIP
    """

    bytes_per_pack: int = 0
    timeout_seconds: float | None = None
    implementation: CommunicationImplementation | str = CommunicationImplementation.AUTO
    compression: Any = None

    def __post_init__(self) -> None:
        if self.bytes_per_pack < 0:
            raise ValueError(f"bytes_per_pack must be >= 0. Received: bytes_per_pack={self.bytes_per_pack}")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive. Received: timeout_seconds={self.timeout_seconds}")
        parse_enum(CommunicationImplementation, self.implementation, "implementation")
        object.__setattr__(self, "compression", parse_compression(self.compression))

    def resolved_timeout_s(self) -> float:
        """The timeout in force: the explicit one, else the environment's, else the default."""
        if self.timeout_seconds is not None:
            return float(self.timeout_seconds)
        return number_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S,
                               meaning="how many seconds a rendezvous or collective may wait for a peer")

    def backend(self, device_type: str) -> str:
        """The torch.distributed backend name for replicas on ``device_type``."""
        impl = parse_enum(CommunicationImplementation, self.implementation, "implementation")
        if impl is CommunicationImplementation.NCCL or (impl is CommunicationImplementation.AUTO and device_type == "cuda"):
            return "nccl"
        return "gloo"
