"""Horovod's gradient compressors: ``Compression.none`` and ``Compression.fp16``.

A compressor turns a tensor into what travels (``compress`` returns it and a
context) and back (``decompress``), around the all-reduce. Users may write
their own with the same two static methods, as in Horovod. This is Horovod's
interface over single tensors, which the ``DistributedOptimizer``'s
per-gradient asynchronous all-reduces need; ``stratagem.distribute.compression``
compresses DDP's gradient buckets for the strategies instead.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface of a compressor: ``compress(tensor) -> (tensor, ctx)`` and ``decompress(tensor, ctx)``."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Returns what to send and what ``decompress`` needs to undo it."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Returns the received tensor in its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes) and casts the result back."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if not tensor.is_floating_point():  # integers are sent exactly, as Horovod does
            return tensor, None
        return tensor.to(torch.float16), tensor.dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    """The built-in compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
