"""``tf.image``'s decode, dtype and resize ops on torch tensors (``stratagem.image``).

Images are channels last, as in TF. Decoding uses Pillow; resizing torch's ``interpolate`` with TF 2's pixel centres.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

_MODES = {0: None, 1: "L", 3: "RGB", 4: "RGBA"}
# TF 2 method name -> torch interpolate mode. TF's "bicubic" uses Keys' a=-0.5, torch a=-0.75, so
# values would differ silently: it is refused rather than approximated.
_RESIZE_METHODS = {"bilinear": "bilinear", "nearest": "nearest-exact", "area": "area"}


def decode_image(contents: bytes | str, channels: int = 0) -> torch.Tensor:
    """Decodes a JPEG, PNG, BMP or GIF (first frame) into a uint8 ``(H, W, C)`` tensor.

    Args:
        contents: The encoded bytes (what ``stratagem.io.read_file`` returns).
        channels: 0 keeps the file's channels; 1, 3 or 4 converts to grayscale, RGB or RGBA.

    Raises:
        ValueError: If ``channels`` is not 0, 1, 3 or 4, or the bytes are not an image Pillow can decode.

    Example:
        >>> image = decode_image(read_file("cat.jpg"), channels=3)  # doctest: +SKIP
    """
    from PIL import Image

    if channels not in _MODES:
        raise ValueError(f"channels must be 0 (as in the file), 1, 3 or 4. Received: channels={channels!r}")
    data = contents.encode() if isinstance(contents, str) else bytes(contents)
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            mode = _MODES[channels] or ("RGB" if image.mode not in ("L", "RGB", "RGBA") else image.mode)
            array = np.array(image.convert(mode))  # a writable copy: torch shares its memory
    except (OSError, ValueError, SyntaxError) as err:
        raise ValueError(f"Cannot decode the image: the bytes are corrupt or not an image Pillow reads. "
                         f"Received: {len(data)} bytes starting {data[:8]!r}") from err
    return torch.from_numpy(array if array.ndim == 3 else array[..., None])


def decode_jpeg(contents: bytes | str, channels: int = 0) -> torch.Tensor:
    """``tf.image.decode_jpeg``: a uint8 ``(H, W, C)`` tensor; see ``decode_image``."""
    return decode_image(contents, channels)


def decode_png(contents: bytes | str, channels: int = 0) -> torch.Tensor:
    """``tf.image.decode_png`` (8-bit PNGs): a uint8 ``(H, W, C)`` tensor; see ``decode_image``."""
    return decode_image(contents, channels)


def convert_image_dtype(image: Any, dtype: torch.dtype, saturate: bool = False) -> torch.Tensor:
    """Converts an image's dtype, rescaling as ``tf.image.convert_image_dtype`` does.

    Integers map onto [0, 1] (uint8 / 255); floats onto the integer range (times ``max + 0.5``, truncated).

    Args:
        image: A tensor or array.
        dtype: The torch dtype to convert to (``torch.float32``, ...).
        saturate: Clip to the target range before converting to an integer type.
    """
    image = torch.as_tensor(image)
    source, target = image.dtype, dtype
    if source == target:
        return image
    if not source.is_floating_point and target.is_floating_point:
        return image.to(target) / torch.iinfo(source).max  # divided in the target precision, as TF does
    if source.is_floating_point and target.is_floating_point:
        return image.to(target)
    if source.is_floating_point:
        scaled = image * (torch.iinfo(target).max + 0.5)
        if saturate:
            scaled = scaled.clamp(torch.iinfo(target).min, torch.iinfo(target).max)
        return scaled.to(target)
    ratio = (torch.iinfo(source).max + 1) / (torch.iinfo(target).max + 1)
    wide = image.to(torch.int64)
    return (wide // int(ratio) if ratio >= 1 else wide * int(1 / ratio)).to(target)


def resize(images: Any, size: Sequence[int], method: str = "bilinear", preserve_aspect_ratio: bool = False,
           antialias: bool = False) -> torch.Tensor:
    """``tf.image.resize``: ``(H, W, C)`` or ``(B, H, W, C)`` images to ``size = (height, width)``.

    Float32 (``nearest`` keeps the dtype) with TF 2's pixel centres, so bilinear values match TF's.

    Raises:
        ValueError: For a method other than ``bilinear``, ``nearest`` or ``area``, or images that are not 3-D or 4-D.
    """
    if method not in _RESIZE_METHODS:
        raise ValueError(f"method must be one of {sorted(_RESIZE_METHODS)} (bicubic, lanczos and gaussian are not "
                         f"offered: their kernels differ from TF's). Received: method={method!r}")
    images = torch.as_tensor(images)
    if images.ndim not in (3, 4):
        raise ValueError(f"images must be (height, width, channels) or a batch of them. Received: shape "
                         f"{tuple(images.shape)}")
    height, width = (int(side) for side in size)
    if preserve_aspect_ratio:
        scale = min(height / images.shape[-3], width / images.shape[-2])
        height, width = max(1, round(images.shape[-3] * scale)), max(1, round(images.shape[-2] * scale))
    batch = images if images.ndim == 4 else images[None]
    mode = _RESIZE_METHODS[method]
    channels_first = batch.permute(0, 3, 1, 2)
    if mode != "nearest-exact":
        channels_first = channels_first.to(torch.float32)
    out = F.interpolate(channels_first, size=(height, width), mode=mode,
                        antialias=antialias and mode == "bilinear",
                        **({"align_corners": False} if mode == "bilinear" else {}))
    out = out.permute(0, 2, 3, 1).contiguous()
    return out if images.ndim == 4 else out[0]


__all__ = ["convert_image_dtype", "decode_image", "decode_jpeg", "decode_png", "resize"]
