"""Horovod's semantics that its own test suite checks, in 2 real gloo processes (one spawn).

Mismatched calls raise HorovodInternalError on both ranks and the job goes
on; int16 travels exactly; integer scaling truncates; alltoall, grouped
allreduce, reducescatter, grouped allgather and grouped reducescatter have
Horovod's gradients; grouped and sparse collectives; sparse_as_dense hands
sparse gradients back sparse; a named _async call issued on one rank before
the other waits for it while other collectives go on (Horovod matches by
name); hvd.join stands in with zeros, so a rank with fewer batches trains to
the same weights as one process on the union of the batches; a
DistributedOptimizer outside its process set steps locally; elastic state is
the same on every rank after sync and restore.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from stratagem.testing import run_workers

pytestmark = pytest.mark.dist


def _check_mismatches_raise_everywhere(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    cases = [
        (lambda: hvd.allreduce(torch.ones(3 + rank)), "shapes"),  # gloo would abort the process here
        (lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32 if rank else torch.float32)), "dtypes"),
        (lambda: hvd.allgather(torch.ones(2, 3 + rank)), "shapes beyond axis 0"),
        (lambda: hvd.broadcast(torch.ones(2), root_rank=rank), "root ranks"),
        (lambda: hvd.reducescatter(torch.ones(4, 1 + rank)), "shapes"),
        (lambda: hvd.alltoall(torch.ones(2, 1 + rank)), "shapes beyond axis 0"),
        (lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum if rank else hvd.Max), "reductions"),
    ]
    for call, field in cases:
        with pytest.raises(hvd.HorovodInternalError, match=f"different {field}.*Received"):
            call()
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [2.0, 2.0], "the job goes on after the errors"
    model = nn.Linear(2 + rank, 1)  # DistributedOptimizer checks a step's gradients once, before any moves
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(hvd.HorovodInternalError, match=r"different gradients \(count, checksum"):
        model(torch.ones(1, 2 + rank)).sum().backward()  # raised at the step's first all-reduce
    hvd.allreduce_async(torch.ones(1), name="twice")
    with pytest.raises(ValueError, match="still in flight"):
        hvd.allreduce_async(torch.ones(1), name="twice")


def _check_dtypes_and_rounding(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    small = torch.tensor([30000, -3, 7], dtype=torch.int16) + rank
    summed = hvd.allreduce(small, op=hvd.Sum)
    # int16 arithmetic wraps as Horovod's does: 30000 + 30001 = 60001 -> 60001 - 65536.
    assert summed.dtype == torch.int16 and summed.tolist() == [60001 - 65536, -5, 15], f"int16 sum: {summed}"
    assert hvd.allgather(small).tolist() == [30000, -3, 7, 30001, -2, 8]
    assert hvd.broadcast(small, root_rank=1).tolist() == [30001, -2, 8]
    # Horovod scales integers in float64 and truncates toward zero: trunc(-7 * 0.5) = -3 on each rank.
    odd = torch.tensor([-7, 7])
    assert hvd.allreduce(odd, op=hvd.Sum, prescale_factor=0.5).tolist() == [-6, 6], "prescale truncates"
    assert hvd.allreduce(odd, op=hvd.Sum, postscale_factor=0.25).tolist() == [-3, 3], "postscale truncates"
    # So does an integer average (the sum scaled by 1/2): rank 0's share of [-7, 5] / 2 is -3, rank 1's 2.
    share = hvd.reducescatter(torch.tensor([-7, 5]) if rank == 0 else torch.zeros(2, dtype=torch.int64))
    assert share.tolist() == ([-3] if rank == 0 else [2]), f"integer average share: {share}"


def _check_gradients_and_grouped(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    rows = torch.arange(4.0).unsqueeze(1).requires_grad_(True)
    out, received = hvd.alltoall(rows, splits=[1, 3] if rank == 0 else [2, 2])
    (out * (rank + 1)).sum().backward()
    # Each row's gradient is the weight of the rank it was sent to: rank 0 weighs 1, rank 1 weighs 2.
    expected = [1.0, 2.0, 2.0, 2.0] if rank == 0 else [1.0, 1.0, 2.0, 2.0]
    assert rows.grad.squeeze(1).tolist() == expected, f"alltoall grad: {rows.grad}"
    pair = [torch.full((2,), 1.0 + rank, requires_grad=True), torch.full((3,), 2.0, requires_grad=True)]
    summed = hvd.grouped_allreduce(pair, op=hvd.Sum)
    (summed[0].sum() * (rank + 1) + summed[1].sum()).backward()
    assert pair[0].grad.tolist() == [3.0, 3.0] and pair[1].grad.tolist() == [2.0] * 3, "grouped_allreduce grad"
    table = torch.ones(4, 2, requires_grad=True)
    (hvd.reducescatter(table, op=hvd.Sum) * (rank + 1)).sum().backward()
    # Rank r's share came from every rank's rows of that share; Horovod's gradient: gathered, times size.
    assert table.grad[:, 0].tolist() == [2.0, 2.0, 4.0, 4.0], f"reducescatter grad: {table.grad}"
    gathered = hvd.grouped_allgather([torch.tensor([rank]), torch.full((rank + 1, 2), rank)])
    assert gathered[0].tolist() == [0, 1] and gathered[1].tolist() == [[0, 0], [1, 1], [1, 1]]
    shares = hvd.grouped_reducescatter([torch.arange(3.0), torch.ones(2, 2)], op=hvd.Sum)
    assert shares[0].tolist() == ([0.0, 2.0] if rank == 0 else [4.0]) and shares[1].tolist() == [[2.0, 2.0]]
    sparse = torch.sparse_coo_tensor([[rank, 2]], [1.0, 10.0], (3,), check_invariants=True)
    reduced = hvd.sparse_allreduce_async(sparse, name="s", op=hvd.Average)()
    assert reduced.to_dense().tolist() == [0.5, 0.5, 10.0], f"sparse average: {reduced.to_dense()}"


def _check_grouped_gradients_and_sparse_as_dense(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    rows = torch.ones(rank + 1, 2, requires_grad=True)  # rank 0 sends 1 row, rank 1 sends 2
    single = torch.ones(1, requires_grad=True)
    gathered = hvd.grouped_allgather([rows, single])
    row_weights = torch.arange(1.0, 4.0).unsqueeze(1) * (rank + 1)  # row i of the 3 gathered weighs (i+1)(rank+1)
    ((gathered[0] * row_weights).sum() + (gathered[1] * 10.0 * (rank + 1)).sum()).backward()
    # Horovod's rule: the ranks' gradients averaged (row i: 1.5 (i+1)), each rank keeping the rows it sent.
    assert rows.grad[:, 0].tolist() == ([1.5] if rank == 0 else [3.0, 4.5]), f"grouped_allgather grad: {rows.grad}"
    assert single.grad.tolist() == [15.0], f"grouped_allgather grad: {single.grad}"
    table, column = torch.ones(4, 2, requires_grad=True), torch.ones(3, requires_grad=True)
    shares = hvd.grouped_reducescatter([table, column], op=hvd.Sum)
    (shares[0].sum() * (rank + 1) + shares[1].sum() * (rank + 1)).backward()
    # As reducescatter: the shares' gradients gathered, times size; rank 0 holds rows 0-1 (of 3: 0-1).
    assert table.grad[:, 0].tolist() == [2.0, 2.0, 4.0, 4.0], f"grouped_reducescatter grad: {table.grad}"
    assert column.grad.tolist() == [2.0, 2.0, 4.0], f"grouped_reducescatter grad: {column.grad}"
    embedding = nn.Embedding(5, 2, sparse=True)
    optimizer = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(embedding.parameters())), sparse_as_dense=True)
    embedding(torch.tensor([1 + rank, 2 + rank])).sum().backward()
    optimizer.synchronize()
    # Sent dense, handed back sparse as Horovod does, so a sparse-only optimizer can step.
    grad = embedding.weight.grad
    assert grad.is_sparse and grad.to_dense()[:, 0].tolist() == [0.0, 0.5, 1.0, 0.5, 0.0], f"sparse_as_dense: {grad}"
    with optimizer.skip_synchronize():
        optimizer.step()


def _check_names_match_calls(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    # Horovod matches by name: rank 0 issues "late" first, both ranks go through other collectives, then rank 1.
    values = torch.full((3,), rank + 1.0)
    if rank == 0:
        late = hvd.allreduce_async(values, name="late", op=hvd.Sum)
        assert not hvd.poll(late), "rank 1 has not issued it yet"
        with pytest.raises(ValueError, match="still in flight"):
            hvd.allreduce_async(values, name="late")
    hvd.barrier()
    assert hvd.allgather(torch.tensor([rank])).tolist() == [0, 1], "other collectives go on meanwhile"
    if rank == 1:
        late = hvd.allreduce_async(values, name="late", op=hvd.Sum)
    assert hvd.synchronize(late).tolist() == [3.0] * 3
    # One name, different shapes: both ranks raise when the second issues it.
    if rank == 0:
        bad = hvd.allgather_async(torch.ones(2, 2), name="bad")
    hvd.barrier()
    if rank == 1:
        with pytest.raises(hvd.HorovodInternalError, match="different shapes beyond axis 0"):
            hvd.allgather_async(torch.ones(2, 3), name="bad")
    else:
        with pytest.raises(hvd.HorovodInternalError, match="different shapes beyond axis 0"):
            hvd.synchronize(bad)
    # Names no other rank ever issues: an error on both, not a hang.
    alone = hvd.broadcast_async(torch.ones(1), root_rank=0, name=f"only on rank {rank}")
    with pytest.raises(hvd.HorovodInternalError, match="waiting for named operations"):
        hvd.synchronize(alone)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).tolist() == [2.0], "the job goes on after the errors"


def _check_join(hvd, rank: int) -> dict:  # type: ignore[no-untyped-def]
    values = torch.tensor([3.0, -5.0])
    if rank == 0:
        last = hvd.join()
        return {"last": last}
    averaged = hvd.allreduce(values)  # rank 0 stands in with zeros; Average divides by 2
    ints = hvd.allreduce(torch.tensor([-7, 7]))  # Horovod scales by 1/2 in float64 and truncates: -3.5 -> -3
    grouped = hvd.grouped_allreduce([values, torch.ones(2, 2)], op=hvd.Sum)
    with pytest.raises(hvd.HorovodInternalError, match="not supported while ranks have called hvd.join"):
        hvd.allgather(values)
    last = hvd.join()
    return {"last": last, "averaged": averaged.tolist(), "ints": ints.tolist(), "grouped": grouped[1].tolist()}


def _uneven_training(hvd, rank: int, batches: list) -> list:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    for x, y in batches[rank::2]:  # rank 0 gets 3 batches, rank 1 gets 2
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    # Horovod's idiom: the rank that joined last took every step; the others take its weights.
    hvd.broadcast_parameters(model.state_dict(), root_rank=hvd.join())
    return [p.detach().tolist() for p in model.parameters()]  # plain data: tensors do not survive the queue


def _local_outside_process_set(hvd, rank: int) -> list:  # type: ignore[no-untyped-def]
    only_zero = hvd.add_process_set([0])
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), process_set=only_zero)
    model(torch.full((1, 2), float(rank + 1))).sum().backward()
    optimizer.step()  # rank 1 is outside the set: a local step on its own gradient
    return [p.detach().tolist() for p in model.parameters()]


def _elastic_state_agrees(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    model = nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(float(rank + 1))
    state = hvd.elastic.TorchState(model, batch=10 + rank)
    state.sync()
    state.batch = 99
    with torch.no_grad():
        model.weight.fill_(-1.0)
    state.restore()  # back to the synced state, the same on every rank (rank 0's)
    assert state.batch == 10 and model.weight.item() == 1.0, (state.batch, model.weight.item())


def _elastic_run_resets_every_rank(hvd, rank: int) -> bool:  # type: ignore[no-untyped-def]
    import os
    import tempfile

    from stratagem.horovod.elastic import STATE_FILE_ENV

    # Each rank's own folder, as on hosts that share no disk: only rank 0's holds the committed state.
    with tempfile.TemporaryDirectory() as folder:
        os.environ[STATE_FILE_ENV] = os.path.join(folder, "state.pt")
        try:
            state = hvd.elastic.TorchState(nn.Linear(1, 1), epoch=3)
            state.commit()  # written by rank 0 only
            resets: list[int] = []
            state.register_reset_callbacks([lambda: resets.append(1)])
            hvd.elastic.run(lambda s: None)(state)
        finally:
            del os.environ[STATE_FILE_ENV]
    return resets == [1]


def _worker(rank: int, world_size: int, batches: list) -> dict:
    import stratagem.horovod as hvd

    hvd.init()
    _check_mismatches_raise_everywhere(hvd, rank)
    _check_dtypes_and_rounding(hvd, rank)
    _check_gradients_and_grouped(hvd, rank)
    _check_grouped_gradients_and_sparse_as_dense(hvd, rank)
    _check_names_match_calls(hvd, rank)
    joined = _check_join(hvd, rank)
    _elastic_state_agrees(hvd, rank)
    return {"join": joined, "uneven": _uneven_training(hvd, rank, batches),
            "reset": _elastic_run_resets_every_rank(hvd, rank),
            "local": _local_outside_process_set(hvd, rank)}


def test_horovod_semantics_on_two_ranks_match_horovod() -> None:
    torch.manual_seed(1)
    batches = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(5)]
    results = run_workers(_worker, 2, args=(batches,), timeout_s=90)
    assert [r["reset"] for r in results] == [True, True], "a resumed run calls the reset callbacks on every rank"
    assert results[0]["join"] == {"last": 1}
    assert results[1]["join"] == {"last": 1, "averaged": [1.5, -2.5], "ints": [-3, 3], "grouped": [[1.0, 1.0]] * 2}
    # Reference: one process; steps 1-2 average both ranks' gradients, step 3 is rank 0's alone
    # averaged with the joined rank's zeros (half of it), as Horovod's join defines.
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        pieces = [batches[2 * step + r] for r in range(2) if 2 * step + r < len(batches)]
        loss = sum(nn.functional.mse_loss(model(x), y) for x, y in pieces) / 2
        loss.backward()
        optimizer.step()
    for result in results:
        for got, want in zip(result["uneven"], model.parameters()):
            assert_close(torch.tensor(got), want.detach(), rtol=1e-6, atol=1e-6)
    torch.manual_seed(0)
    local = nn.Linear(2, 1)
    local(torch.full((1, 2), 2.0)).sum().backward()
    with torch.no_grad():
        expected = [p - p.grad for p in local.parameters()]
    for got, want in zip(results[1]["local"], expected):
        assert_close(torch.tensor(got), want)


def _worker_reinit(rank: int, world_size: int, cycles: int) -> list:
    import stratagem.horovod as hvd

    seen = []
    hvd.init()
    for _ in range(cycles):
        # As Horovod's test_horovod_reinit: shutdown and init at once, no collective between, so a rank
        # that leaves first reaches the chief while the chief may still be closing the old group.
        hvd.shutdown()
        assert not hvd.is_initialized()
        hvd.init()
        seen.append((hvd.rank(), hvd.size(), hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum).item()))
    hvd.shutdown()
    return seen


def test_shutdown_then_init_in_one_process_rejoins_the_same_job() -> None:
    results = run_workers(_worker_reinit, 2, args=(4,), timeout_s=60)
    assert results == [[(rank, 2, 3.0)] * 4 for rank in range(2)]
