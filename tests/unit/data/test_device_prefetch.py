"""prefetch_to_device: a passthrough on the CPU; the CUDA path runs only where CUDA exists."""

from __future__ import annotations

import pytest
import torch

from stratagem.data.device import prefetch_to_device


def test_cpu_device_passes_batches_through_unchanged() -> None:
    batches = [((torch.arange(3), {"y": torch.ones(2)}), 3, "pos") for _ in range(4)]
    out = list(prefetch_to_device(iter(batches), torch.device("cpu")))
    assert len(out) == 4 and all(a is b for a, b in zip(out, batches))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_device_receives_every_batch_in_order_on_the_gpu() -> None:
    batches = [((torch.full((4,), float(i)),), 4, i) for i in range(5)]
    out = list(prefetch_to_device(iter(batches), torch.device("cuda", 0)))
    assert [o[2] for o in out] == list(range(5))
    assert all(o[0][0].is_cuda and float(o[0][0][0]) == i for i, o in enumerate(out))
