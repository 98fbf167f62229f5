"""Horovod's gradient compressors, ``Compression.none`` and ``Compression.fp16``: names over ``distribute.compression``.

A compressor's ``compress`` returns what travels and a context, ``decompress`` turns it back; users may write their own
with these two static methods, as in Horovod.
"""

from __future__ import annotations

from typing import Any

import torch

from stratagem.distribute.compression import compress_tensor, decompress_tensor

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
        return compress_tensor(tensor, None)

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return decompress_tensor(tensor, ctx)


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes) and casts the result back; integers exactly."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return compress_tensor(tensor, "fp16")

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return decompress_tensor(tensor, ctx)


class Compression:
    """The built-in compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
