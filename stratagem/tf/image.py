"""``tf.image``: ``stratagem.image``'s decode/convert/resize ops with TF's dtype arguments, and TF 1's ``resize_images``."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import torch

from stratagem import image as _image
from stratagem.tf import dtypes
from stratagem.tf._refusal import module_getattr
from stratagem.tf._tensor import tensor

decode_image = _image.decode_image
decode_jpeg = _image.decode_jpeg
decode_png = _image.decode_png


class ResizeMethod(str, enum.Enum):
    """``tf.image.ResizeMethod``: the methods ``stratagem.image.resize`` offers."""

    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"
    AREA = "area"


# TF 1's integer codes for resize_images' `method`.
_TF1_METHODS = {0: "bilinear", 1: "nearest", 3: "area"}


def convert_image_dtype(image: Any, dtype: Any, saturate: bool = False, name: str | None = None) -> torch.Tensor:
    """``tf.image.convert_image_dtype``: integers scale onto [0, 1] for floats, floats onto the integer range."""
    return _image.convert_image_dtype(tensor(image), dtypes.torch_dtype(dtype), saturate)


def resize(images: Any, size: Sequence[int], method: Any = ResizeMethod.BILINEAR, preserve_aspect_ratio: bool = False,
           antialias: bool = False, name: str | None = None) -> torch.Tensor:
    """``tf.image.resize`` (TF 2's half-pixel sampling): float32, or the input dtype for ``nearest``."""
    return _image.resize(tensor(images), _size(size), _method(method), preserve_aspect_ratio, antialias)


def resize_images(images: Any, size: Sequence[int], method: Any = 0, align_corners: bool = False,
                  preserve_aspect_ratio: bool = False, name: str | None = None) -> torch.Tensor:
    """TF 1's ``tf.image.resize_images`` as TF 2's ``tf.image.resize`` samples (``align_corners`` refuses).

    TF 1 aligned pixel corners, so bilinear values differ slightly from TF 1's.
    """
    if align_corners:
        raise ValueError("resize_images(align_corners=True) is not provided: resizing samples as TF 2's "
                         "tf.image.resize does (half-pixel centres). Received: align_corners=True")
    return resize(images, size, method, preserve_aspect_ratio)


def _size(size: Any) -> list[int]:
    return [int(s) for s in (size.tolist() if isinstance(size, torch.Tensor) else size)]


def _method(method: Any) -> str:
    if isinstance(method, int) and not isinstance(method, bool):
        if method not in _TF1_METHODS:
            raise ValueError(f"resize method {method} (TF 1's BICUBIC) is not provided; use BILINEAR, "
                             f"NEAREST_NEIGHBOR or AREA. Received: method={method}")
        return _TF1_METHODS[method]
    return str(method.value if isinstance(method, ResizeMethod) else method)


def flip_left_right(image: Any) -> torch.Tensor:
    return tensor(image).flip(-2)


def flip_up_down(image: Any) -> torch.Tensor:
    return tensor(image).flip(-3)


def random_flip_left_right(image: Any, seed: int | None = None) -> torch.Tensor:
    """``tf.image.random_flip_left_right``: flips the image (each image of a batch) with probability 1/2."""
    value = tensor(image)
    if value.ndim == 3:
        return value.flip(-2) if bool(torch.rand(()) < 0.5) else value
    flip = torch.rand(value.shape[0]) < 0.5
    return torch.where(flip.reshape(-1, 1, 1, 1), value.flip(-2), value)


def rot90(image: Any, k: int = 1, name: str | None = None) -> torch.Tensor:
    """``tf.image.rot90``: ``k`` quarter turns counter-clockwise."""
    return torch.rot90(tensor(image), int(k), dims=(-3, -2))


__getattr__ = module_getattr("tf.image")
__all__ = [
    "ResizeMethod", "convert_image_dtype", "decode_image", "decode_jpeg", "decode_png", "flip_left_right",
    "flip_up_down", "random_flip_left_right", "resize", "resize_images", "rot90",
]
