"""hvd.elastic in one process: the sampler reshards what is left of an epoch; a commit survives a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import stratagem.horovod as hvd
from stratagem.horovod.elastic import STATE_FILE_ENV, ElasticSampler, TorchState


@pytest.fixture
def one_process() -> Iterator[None]:
    hvd.init()
    yield
    hvd.shutdown()


def test_sampler_reshards_the_unprocessed_rest_of_the_epoch_over_fewer_workers() -> None:
    data = range(30)
    three = [ElasticSampler(data, seed=4, num_replicas=3, rank=r) for r in range(3)]
    assert sorted(i for s in three for i in s) == list(range(30))  # one epoch: each example once
    for sampler in three:
        sampler.record_batch(0, 4)  # every worker processed its first batch of 4
        sampler.record_batch(1, 4)
    processed = set().union(*(s.processed_indices for s in three))
    two = [ElasticSampler(data, seed=4, num_replicas=2, rank=r) for r in range(2)]
    for sampler in two:  # what TorchState.sync does after a restart: the union of every rank's record
        sampler.load_state_dict({"epoch": 0, "processed_indices": sorted(processed)})
    rest = [i for s in two for i in s]
    assert len(processed) == 24 and sorted(rest) == sorted(set(range(30)) - processed)
    assert len(two[0]) == len(two[1]) == 3
    two[0].set_epoch(1)
    assert len(two[0]) == 15 and list(two[0]) != list(ElasticSampler(data, seed=4, num_replicas=2, rank=0))


def test_committed_state_is_what_a_restarted_run_starts_from(one_process: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATE_FILE_ENV, str(tmp_path / "state.pt"))
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = ElasticSampler(range(10), num_replicas=1, rank=0)
    state = TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    sampler.record_batch(0, 4)
    state.epoch, state.batch = 0, 1
    state.commit()
    state.check_host_updates()  # a Horovod script calls it after commit: no raise, the agents take in new hosts
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer.step()  # work after the commit is lost on restart

    fresh = nn.Linear(3, 1)  # the restarted process builds everything anew
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    resets: list[int] = []
    restarted = TorchState(fresh, fresh_optimizer, sampler=ElasticSampler(range(10), num_replicas=1, rank=0),
                           epoch=0, batch=0)
    restarted.register_reset_callbacks([lambda: resets.append(1)])

    @hvd.elastic.run
    def train(state: TorchState) -> tuple[int, int, int]:
        return state.epoch, state.batch, len(state.sampler)

    assert train(restarted) == (0, 1, 6)
    assert all(torch.equal(committed[k], v) for k, v in fresh.state_dict().items())
    assert fresh_optimizer.state_dict()["state"][0]["momentum_buffer"] is not None and resets == [1]


def test_restore_brings_back_the_committed_optimizer_state_not_the_current_one(one_process: None) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train_step() -> None:
        optimizer.zero_grad()
        model(torch.ones(2, 3)).sum().backward()
        optimizer.step()

    train_step()  # momentum buffers exist
    state = TorchState(model, optimizer, epoch=0)
    state.commit()
    committed = {i: s["momentum_buffer"].clone() for i, s in optimizer.state_dict()["state"].items()}
    for _ in range(2):  # twice: a restore must leave the saved state untouched by the steps after it
        train_step()
        train_step()  # SGD updates its momentum buffers in place
        state.restore()
        restored = {i: s["momentum_buffer"] for i, s in optimizer.state_dict()["state"].items()}
        torch.testing.assert_close(restored, committed, rtol=0, atol=0)
