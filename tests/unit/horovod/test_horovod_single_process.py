"""stratagem.horovod in one process (a job of size 1, as under Horovod without horovodrun): API and errors."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn

import stratagem.horovod as hvd
from stratagem.distribute.ps import results


@pytest.fixture
def single() -> Iterator[None]:
    hvd.init()
    yield
    hvd.shutdown()


def test_without_init_every_query_says_to_call_init() -> None:
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match=r"call hvd.init\(\) first"):
        hvd.rank()


def test_mpi_communicator_is_refused_with_the_launcher_to_use() -> None:
    with pytest.raises(ValueError, match="stratagem run -np N"):
        hvd.init(comm=object())


def test_a_lone_process_is_a_job_of_size_one(single: None) -> None:
    assert (hvd.size(), hvd.rank(), hvd.local_size(), hvd.local_rank(), hvd.cross_size()) == (1, 0, 1, 0, 1)
    x = torch.tensor([1.0, 4.0])
    assert hvd.allreduce(x).tolist() == [1.0, 4.0] and hvd.allgather(x).tolist() == [1.0, 4.0]
    assert hvd.broadcast_object({"a": 1}) == {"a": 1} and hvd.allgather_object(3) == [3]
    assert hvd.reducescatter(x, op=hvd.Sum).tolist() == [1.0, 4.0] and hvd.join() == 0
    with pytest.raises(NotImplementedError, match="Adasum is not implemented"):
        hvd.allreduce(x, op=hvd.Adasum)
    with pytest.raises(ValueError, match="Unknown reduction.*'mean'"):
        hvd.allreduce(x, op="mean")
    with pytest.raises(ValueError, match="synchronized already"):
        hvd.synchronize(12345)


def _optimizer(**kwargs):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    return model, hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters(), **kwargs)


def test_distributed_optimizer_steps_like_its_optimizer_and_shares_its_state(single: None) -> None:
    model, optimizer = _optimizer()
    reference = nn.Linear(3, 2)
    reference.load_state_dict(model.state_dict())
    plain = torch.optim.SGD(reference.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for net, opt in ((model, optimizer), (reference, plain)):
        net(torch.ones(4, 3)).pow(2).sum().backward()
        opt.step()
    torch.testing.assert_close(model.weight, reference.weight, rtol=0, atol=0)
    scheduler.step()
    assert optimizer._optimizer.param_groups[0]["lr"] == 0.05  # a scheduler on the wrapper sets the wrapped lr


def test_zero_grad_between_backward_and_step_is_refused(single: None) -> None:
    model, optimizer = _optimizer()
    model(torch.ones(1, 3)).sum().backward()
    with pytest.raises(RuntimeError, match="race"):
        optimizer.zero_grad()


def test_more_backward_passes_than_declared_raise_with_the_fix(single: None) -> None:
    model, optimizer = _optimizer(backward_passes_per_step=1)
    model(torch.ones(1, 3)).sum().backward()
    with pytest.raises(RuntimeError, match="more than backward_passes_per_step=1"):
        model(torch.ones(1, 3)).sum().backward()


def test_distributed_optimizer_arguments_are_checked(single: None) -> None:
    model = nn.Linear(3, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="not in it"):
        hvd.DistributedOptimizer(sgd, named_parameters=[("weight", model.weight)])
    with pytest.raises(ValueError, match="unique.*'w'"):
        hvd.DistributedOptimizer(sgd, named_parameters=[("w", model.weight), ("w", model.bias)])
    with pytest.raises(ValueError, match="needs op=hvd.Average"):
        hvd.DistributedOptimizer(sgd, op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="at least 1"):
        hvd.DistributedOptimizer(sgd, backward_passes_per_step=0)


def test_object_codec_round_trips_plain_data_and_refuses_what_needs_pickle() -> None:
    value = {"a": [1, 2.5, None, True], 3: ("x", b"\x00\xff"), "t": torch.arange(4.0), "n": np.eye(2)}
    decoded = results.decode_value(results.encode_value(value), tensors_as_numpy=False)
    assert decoded["a"] == [1, 2.5, None, True] and decoded[3] == ("x", b"\x00\xff")
    assert decoded["t"].tolist() == [0.0, 1.0, 2.0, 3.0] and (decoded["n"] == np.eye(2)).all()
    with pytest.raises(TypeError, match="without pickle.*type=set"):
        results.encode_value({1, 2})
    with pytest.raises(ValueError, match="Header"):
        results.decode_value(b"\x00\x00\x00\x05{bad}")


def test_synchronize_then_step_inside_skip_synchronize_reduces_once(single: None) -> None:
    model, optimizer = _optimizer()
    model(torch.ones(2, 3)).sum().backward()
    optimizer.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)  # the reason for the pattern: clip the reduced gradients
    before = [p.detach().clone() for p in model.parameters()]
    clipped = [p.grad.detach().clone() for p in model.parameters()]
    with optimizer.skip_synchronize():
        optimizer.step()
    lr = optimizer.param_groups[0]["lr"]
    for old, grad, new in zip(before, clipped, model.parameters()):  # one SGD step with the clipped gradients
        torch.testing.assert_close(new.detach(), old - lr * grad)
    optimizer.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    optimizer.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        optimizer.step()


def test_grad_scaler_steps_the_wrapper_as_horovods_mixed_precision_example_does(single: None) -> None:
    model, optimizer = _optimizer()
    before = model.weight.detach().clone()
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(2, 3)).sum()).backward()
    optimizer.synchronize()
    scaler.unscale_(optimizer)  # reads the wrapped optimizer's param_groups through the wrapper
    with optimizer.skip_synchronize():
        scaler.step(optimizer)
    scaler.update()
    # d(sum)/dW is 2 everywhere (two rows of ones); lr 0.1: every weight moves by -0.2 once unscaled.
    torch.testing.assert_close(model.weight.detach(), before - 0.2)


def test_shutdown_forgets_pending_handles_and_init_starts_again() -> None:
    hvd.init()
    handle = hvd.allreduce_async(torch.ones(1))
    hvd.shutdown()
    hvd.init()
    try:
        with pytest.raises(ValueError, match="unknown"):
            hvd.synchronize(handle)
        assert hvd.size() == 1
    finally:
        hvd.shutdown()
