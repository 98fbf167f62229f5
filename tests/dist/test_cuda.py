"""The CUDA paths: a model trained on one GPU, and MirroredStrategy over NCCL, match the CPU.

Skipped where no CUDA device is visible (CI); run on a GPU machine. One GPU
only: NCCL refuses two ranks on one device, so the NCCL job has one rank.
"""

from __future__ import annotations

import pytest
import torch

import stratagem
from stratagem.testing import run_workers
from tests.dist._models import train_small_cnn

pytestmark = [pytest.mark.dist,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _exact_float32() -> None:
    # TF32 matmuls round to 10 bits of mantissa: far from the CPU's float32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _assert_state_close(result: dict, reference: dict) -> None:
    for name, expected in reference["state"].items():
        torch.testing.assert_close(torch.from_numpy(result["state"][name]), torch.from_numpy(expected),
                                   rtol=0, atol=1e-4, msg=lambda m: f"{name}: {m}")


def _worker_nccl(rank: int, world_size: int) -> dict:
    _exact_float32()
    strategy = stratagem.distribute.MirroredStrategy()  # default: every visible GPU
    with strategy.scope():
        result = train_small_cnn("adam")
        result["backend"] = torch.distributed.get_backend()
        result["device"] = str(strategy.device)
    return result


@pytest.mark.timeout(120)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_gpu_training_matches_cpu(optimizer: str) -> None:
    _exact_float32()
    reference = train_small_cnn(optimizer)
    with stratagem.distribute.OneDeviceStrategy("cuda:0").scope():
        result = train_small_cnn(optimizer)
    _assert_state_close(result, reference)


@pytest.mark.timeout(180)
def test_mirrored_strategy_over_nccl_matches_cpu() -> None:
    reference = train_small_cnn("adam")
    (result,) = run_workers(_worker_nccl, world_size=1, timeout_s=150)
    assert result["backend"] == "nccl"
    assert result["device"].startswith("cuda")
    _assert_state_close(result, reference)
