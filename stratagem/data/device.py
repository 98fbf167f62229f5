"""``prefetch_to_device``: have the next batch on the accelerator before the step ends.

On CUDA each batch is copied from pinned memory on a side stream one batch ahead, overlapping the step; CPU: as is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from stratagem._nest import map_structure


def prefetch_to_device(batches: Iterator[tuple[Any, ...]], device: torch.device) -> Iterator[tuple[Any, ...]]:
    """Yields the items of ``batches`` with item 0 (the batch) moved to ``device`` one step ahead."""
    if device.type != "cuda":
        yield from batches
        return
    stream = torch.cuda.Stream(device=device)
    pending = _copy_ahead(next(batches, None), device, stream)
    while pending is not None:
        following = _copy_ahead(next(batches, None), device, stream)
        # The compute stream may touch the batch only after its copy finished,
        # and the caching allocator must not reuse its memory before then.
        torch.cuda.current_stream(device).wait_stream(stream)
        map_structure(lambda t: t.record_stream(torch.cuda.current_stream(device)) if isinstance(t, torch.Tensor) else t,
                      pending[0])
        yield pending
        pending = following


def _copy_ahead(item: tuple[Any, ...] | None, device: torch.device, stream: Any) -> tuple[Any, ...] | None:
    if item is None:
        return None
    with torch.cuda.stream(stream):
        moved = map_structure(lambda t: _to_device(t, device), item[0])
    return (moved, *item[1:])


def _to_device(value: Any, device: torch.device) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    if value.device.type == "cpu":
        value = value.pin_memory()  # page-locked memory is what lets the copy run asynchronously
    return value.to(device, non_blocking=True)
