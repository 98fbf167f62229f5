"""stratagem.horovod's refusals in one process: calls before init, wrong argument types, mismatch messages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

import stratagem.horovod as hvd
from stratagem.horovod._negotiation import Call, Kind, _issued_everywhere, _waits_for_names, disagreement


@pytest.fixture
def single() -> Iterator[None]:
    hvd.init()
    yield
    hvd.shutdown()


@pytest.mark.parametrize("call", [
    lambda: hvd.allreduce(torch.ones(1)), lambda: hvd.allgather(torch.ones(1)),
    lambda: hvd.broadcast(torch.ones(1), 0), lambda: hvd.barrier(), lambda: hvd.join(),
    lambda: hvd.DistributedOptimizer(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)),
])
def test_collectives_before_init_raise_value_error_naming_init(call) -> None:  # type: ignore[no-untyped-def]
    # Horovod raises ValueError("Horovod has not been initialized; use hvd.init().") for these.
    with pytest.raises(ValueError, match=r"hvd.init\(\)"):
        call()


def test_wrong_argument_types_raise_type_errors_naming_the_fix(single: None) -> None:
    with pytest.raises(TypeError, match=r"hvd.allreduce takes a torch.Tensor. Received: type=list"):
        hvd.allreduce([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"wraps a torch.optim.Optimizer.*Received: optimizer of type object"):
        hvd.DistributedOptimizer(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"broadcast_optimizer_state takes.*Received: type=object"):
        hvd.broadcast_optimizer_state(object(), root_rank=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"grouped_allreduce takes a list"):
        hvd.grouped_allreduce(torch.ones(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="splits must hold integers"):
        hvd.alltoall(torch.ones(1), splits=torch.ones(1))


def test_duplicate_name_in_flight_is_refused_and_free_again_after_synchronize(single: None) -> None:
    handle = hvd.allreduce_async(torch.ones(1), name="g")
    with pytest.raises(ValueError, match="'g' is still in flight"):
        hvd.allgather_async(torch.ones(1), name="g")
    hvd.synchronize(handle)
    hvd.synchronize(hvd.allreduce_async(torch.ones(1), name="g"))


def test_broadcast_optimizer_state_gives_trainable_parameters_zero_gradients(single: None) -> None:
    model = nn.Linear(2, 1)
    model.bias.requires_grad_(False)
    hvd.broadcast_optimizer_state(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), root_rank=0)
    assert model.weight.grad is not None and model.weight.grad.abs().sum() == 0 and model.bias.grad is None


def test_disagreement_names_the_field_and_every_ranks_value() -> None:
    same = Call(Kind.ALLREDUCE, torch.float32, (2, 3))
    assert disagreement([(0, same), (1, same)]) is None
    message = disagreement([(0, same), (1, Call(Kind.ALLREDUCE, torch.float32, (2, 4)))])
    assert message is not None and "different shapes" in message and "{0: (2, 3), 1: (2, 4)}" in message
    gathers = [(0, Call(Kind.ALLGATHER, torch.int16, (1, 3))), (1, Call(Kind.ALLGATHER, torch.int16, (5, 3)))]
    assert disagreement(gathers) is None, "allgather lets axis 0 differ"
    kinds = disagreement([(0, same), (1, Call(Kind.BROADCAST, torch.float32, (2, 3), root=0))])
    assert kinds is not None and "different operations" in kinds and "'broadcast'" in kinds


def test_a_named_call_starts_in_the_round_every_rank_has_issued_it() -> None:
    late = Call(Kind.ALLREDUCE, torch.float32, (3,), name=7, deferrable=True)
    barrier, wait = Call(Kind.BARRIER), Call(Kind.WAIT)
    # Three ranks, (current call, deferred calls) each: rank 2 has not issued "late", so it does not start.
    assert _issued_everywhere([(barrier, [late]), (late, []), (barrier, [])]) is None
    assert _waits_for_names([(0, barrier), (1, late), (2, barrier)]), "rank 1 defers it, ranks 0 and 2 ask again"
    assert _issued_everywhere([(wait, [late]), (late, []), (barrier, [late])]) == (Kind.ALLREDUCE, 7)
    # Unnamed calls keep matching by call order: different kinds with none deferrable are a mismatch.
    assert not _waits_for_names([(0, barrier), (1, Call(Kind.ALLREDUCE, torch.float32, (3,)))])
    # One name on every rank runs together, and the check then names what differs (here the shapes).
    assert not _waits_for_names([(0, late), (1, Call(Kind.ALLREDUCE, torch.float32, (4,), name=7, deferrable=True))])


def test_elastic_sampler_counts_every_ranks_batch_of_the_iteration_under_way() -> None:
    sampler = hvd.elastic.ElasticSampler(list(range(8)), shuffle=False, num_replicas=2, rank=0)
    assert list(sampler) == [0, 2, 4, 6] and sampler.processed_num == 0
    # As Horovod 0.28 counts (batch_size * num_replicas): this rank's [0, 2] and rank 1's [1, 3].
    sampler.record_batch(0, 2)
    assert sampler.processed_num == 4 and sampler.processed_indices == {0, 1, 2, 3}
    sampler.load_state_dict({"epoch": 0, "processed_indices": [0, 2]})  # a restore reshards the rest ...
    assert list(sampler.indices) == [1, 4, 6]
    sampler.record_batch(1, 2)  # ... but batch 1 of the iteration under way is still [4, 6] here, [5, 7] on rank 1
    assert sampler.processed_indices == {0, 2, 4, 5, 6, 7}
