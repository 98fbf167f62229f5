"""The CUDA paths: training on a GPU, DDP and CentralStorage replicas on CUDA tensors, NCCL, mixed precision.

Skipped where no CUDA device is visible (CI); run on a GPU machine. The GPU
machines lent to this project have one GPU, and NCCL refuses two ranks on one
device ("Duplicate GPU detected"), so: the NCCL group is checked with one rank
(init with the device id, an all-reduce, a DDP step), and two replicas share the
GPU over gloo (CUDA tensors, ``implementation="ring"``), which runs every other
part of the multi-replica CUDA path (device placement, DDP on CUDA, the
global-batch rule) against the one-replica CPU reference.
"""

from __future__ import annotations

import pytest
import torch

import stratagem
import keras  # noqa: F401  (imported here, before any test: importing it may set environment variables)
from stratagem.distribute import CentralStorageStrategy, MirroredStrategy, OneDeviceStrategy
from stratagem.distribute.options import CommunicationOptions
from stratagem.testing import run_workers
from tests.dist._models import train_small_cnn

pytestmark = [pytest.mark.dist,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

_GLOO_ON_CUDA = CommunicationOptions(implementation="ring")


def _exact_float32() -> None:
    # TF32 matmuls round to 10 bits of mantissa: far from the CPU's float32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _assert_state_close(result: dict, reference: dict, atol: float = 1e-4) -> None:
    for name, expected in reference["state"].items():
        torch.testing.assert_close(torch.from_numpy(result["state"][name]), torch.from_numpy(expected),
                                   rtol=0, atol=atol, msg=lambda m: f"{name}: {m}")


def _cpu_reference(optimizer: str) -> dict:
    # The default strategy computes on the GPU when there is one (as TF's): the reference names the CPU.
    with OneDeviceStrategy("cpu").scope():
        return train_small_cnn(optimizer)


def _worker_two_replicas_on_one_gpu(rank: int, world_size: int, kind: str) -> dict:
    _exact_float32()
    devices = ["cuda:0"] * world_size
    if kind == "mirrored":
        strategy = MirroredStrategy(devices, communication_options=_GLOO_ON_CUDA)
    else:
        strategy = CentralStorageStrategy(devices, communication_options=_GLOO_ON_CUDA)
    with strategy.scope():
        result = train_small_cnn("adam")
        result["device"] = str(strategy.device)
        result["backend"] = torch.distributed.get_backend()
        result["replicas"] = strategy.num_replicas_in_sync
    return result


def _worker_nccl_group(rank: int, world_size: int) -> dict:
    import os

    from stratagem.distribute import collectives

    torch.cuda.set_device(0)
    collectives.init_process_group(rank=rank, world_size=world_size, master_addr="127.0.0.1",
                                   master_port=int(os.environ["MASTER_PORT"]), backend="nccl", timeout_s=30)
    value = torch.full((3,), 2.0, device="cuda")
    torch.distributed.all_reduce(value)
    module = collectives.wrap_ddp(torch.nn.Linear(4, 2).cuda(), device=torch.device("cuda", 0), bucket_cap_mb=None)
    module(torch.ones(5, 4, device="cuda")).sum().backward()
    grad = module.module.weight.grad.detach().cpu().numpy()
    backend = torch.distributed.get_backend()
    collectives.destroy_process_group()
    return {"backend": backend, "sum": value.cpu().tolist(), "grad": grad}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_gpu_training_matches_cpu(optimizer: str) -> None:
    _exact_float32()
    reference = _cpu_reference(optimizer)
    with OneDeviceStrategy("cuda:0").scope():
        result = train_small_cnn(optimizer)
    _assert_state_close(result, reference)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["mirrored", "central_storage"])
def test_two_replicas_on_cuda_tensors_match_one_cpu_replica(kind: str) -> None:
    reference = _cpu_reference("adam")
    results = run_workers(_worker_two_replicas_on_one_gpu, world_size=2, args=(kind,), timeout_s=200)
    for result in results:
        assert result["device"].startswith("cuda") and result["replicas"] == 2 and result["backend"] == "gloo"
        _assert_state_close(result, reference)
        assert result["evaluate"]["loss"] == pytest.approx(reference["evaluate"]["loss"], abs=1e-4)


@pytest.mark.timeout(120)
def test_nccl_group_all_reduces_and_runs_a_ddp_step() -> None:
    (result,) = run_workers(_worker_nccl_group, world_size=1, timeout_s=100)
    assert result["backend"] == "nccl"
    assert result["sum"] == [2.0, 2.0, 2.0]
    torch.testing.assert_close(torch.from_numpy(result["grad"]), torch.full((2, 4), 5.0))


@pytest.mark.timeout(120)
def test_mixed_float16_on_gpu_computes_in_float16_and_keeps_float32_weights() -> None:
    reference = _cpu_reference("adam")
    stratagem.mixed_precision.set_global_policy("mixed_float16")
    try:
        with OneDeviceStrategy("cuda:0").scope():
            result = train_small_cnn("adam")
    finally:
        stratagem.mixed_precision.set_global_policy("float32")
    assert all(v.dtype.name == "float32" for v in result["state"].values())
    # float16 activations: close to the float32 run, but not equal to it.
    _assert_state_close(result, reference, atol=5e-2)
    assert any(abs(result["state"][k] - reference["state"][k]).max() > 1e-6 for k in reference["state"])
    assert result["history"]["loss"][-1] < result["history"]["loss"][0]


def _keras_fit(strategy: object, initial: list | None) -> tuple[dict, str, list]:
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    with strategy.scope():  # type: ignore[attr-defined]
        keras_model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                                        keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dense(10)])
        if initial is not None:  # the RNG draws differ by device: start both from the same weights
            keras_model.set_weights(initial)
        weights = keras_model.get_weights()
        model = stratagem.Model(keras_model)
        model.compile(optimizer=keras.optimizers.SGD(0.1), metrics=[keras.metrics.SparseCategoricalAccuracy()],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 28, 28, 1), dtype=np.float32), rng.integers(0, 10, 64)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    state = {k: v.detach().cpu().numpy() for k, v in model.module.state_dict().items()}
    return {"state": state}, str(next(model.module.parameters()).device), weights


@pytest.mark.timeout(120)
def test_keras_model_trains_on_the_strategy_device_not_kerass_default() -> None:
    # Keras's torch backend makes its tensors on the GPU whenever there is one: a Keras model under a CPU
    # strategy on a GPU machine mixed devices ("Expected all tensors to be on the same device").
    _exact_float32()
    on_cpu, cpu_device, initial = _keras_fit(OneDeviceStrategy("cpu"), None)
    on_gpu, gpu_device, _ = _keras_fit(OneDeviceStrategy("cuda:0"), initial)
    assert cpu_device == "cpu" and gpu_device.startswith("cuda")
    _assert_state_close(on_gpu, on_cpu)

