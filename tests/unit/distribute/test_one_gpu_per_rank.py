"""NCCL needs one GPU per rank: a host whose ranks would share one is refused before NCCL fails or hangs.

``check_one_gpu_per_rank`` decides from the local rank, the ranks on the host,
the GPUs this process sees and the backend, so it is tested here without a GPU;
``CollectiveStrategy._setup`` calls it where the backend and device are chosen.
"""

from __future__ import annotations

import pytest

from stratagem.distribute._collective import check_one_gpu_per_rank
from stratagem.errors import ConfigurationError


@pytest.mark.parametrize(("local_rank", "local_world_size", "gpus", "backend", "visible"), [
    (0, 2, 2, "nccl", None),  # one GPU each
    (3, 4, 8, "nccl", None),  # fewer ranks than GPUs
    (1, 4, 1, "nccl", "5"),  # each process shown its own GPU (a launcher pins them)
    (1, 4, 1, "gloo", None),  # CPU tensors: no GPU needed
    (0, 1, 0, "nccl", None),  # one rank alone makes no collective
    (0, 2, 1, "cpu:gloo,cuda:gloo", None),
])
def test_one_gpu_per_rank_passes(local_rank: int, local_world_size: int, gpus: int, backend: str,
                                 visible: str | None) -> None:
    check_one_gpu_per_rank(local_rank=local_rank, local_world_size=local_world_size, num_visible_devices=gpus,
                           backend=backend, visible_devices=visible)


@pytest.mark.parametrize("backend", ["nccl", "cpu:gloo,cuda:nccl"])
def test_more_ranks_than_gpus_names_the_ranks_the_gpu_and_the_fix(backend: str) -> None:
    with pytest.raises(ConfigurationError, match=r"this host runs 4 ranks and sees 2 GPU\(s\), so local ranks 1, 3 "
                                                 r"would all use cuda:1 .*stratagem run -n 2, torchrun "
                                                 r"--nproc_per_node 2\).*CUDA_VISIBLE_DEVICES.*Received: local_rank=3, "
                                                 r"local_world_size=4, visible_gpus=2"):
        check_one_gpu_per_rank(local_rank=3, local_world_size=4, num_visible_devices=2, backend=backend)


def test_two_ranks_on_one_gpu_are_refused_also_when_it_is_named_for_both() -> None:
    # CUDA_VISIBLE_DEVICES="0,1" shows both GPUs to every rank: not a per-rank pin, so the count decides.
    with pytest.raises(ConfigurationError, match=r"local ranks 0, 2 would all use cuda:0"):
        check_one_gpu_per_rank(local_rank=0, local_world_size=3, num_visible_devices=2, backend="nccl",
                               visible_devices="0,1")
    with pytest.raises(ConfigurationError, match=r"local ranks 0, 1 would all use cuda:0"):
        check_one_gpu_per_rank(local_rank=1, local_world_size=2, num_visible_devices=1, backend="nccl")


def test_nccl_without_a_gpu_says_so() -> None:
    with pytest.raises(ConfigurationError, match=r"local rank 0 sees no GPU.*implementation='ring'"):
        check_one_gpu_per_rank(local_rank=0, local_world_size=2, num_visible_devices=0, backend="nccl")
