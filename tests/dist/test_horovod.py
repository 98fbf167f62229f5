"""stratagem.horovod in 2 real gloo processes: every collective with its values checked, and
DistributedOptimizer matching one process on the global batch.

One spawn runs everything (spawning is the slow part). Collective checks raise
in the worker with the collective's name. For the optimizer the parent trains
the reference: one process, the whole global batch per step; the workers each
take half of every global batch (and, with backward_passes_per_step=2, split
their half into two micro-batches whose losses they scale by 1/2, as Horovod
asks).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from stratagem.testing import run_workers

pytestmark = pytest.mark.dist


def _check_allreduce(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    x = torch.tensor([1.0, 2.0]) * (rank + 1)  # rank 0: [1, 2], rank 1: [2, 4]
    assert_close(hvd.allreduce(x), torch.tensor([1.5, 3.0]), msg="allreduce average")
    assert_close(x, torch.tensor([1.0, 2.0]) * (rank + 1), msg="allreduce leaves its input alone")
    assert_close(hvd.allreduce(x, op=hvd.Sum), torch.tensor([3.0, 6.0]), msg="allreduce sum")
    assert_close(hvd.allreduce(x, average=False), torch.tensor([3.0, 6.0]), msg="allreduce average=False")
    assert_close(hvd.allreduce(x, op=hvd.Min), torch.tensor([1.0, 2.0]), msg="allreduce min")
    assert_close(hvd.allreduce(x, op=hvd.Max), torch.tensor([2.0, 4.0]), msg="allreduce max")
    assert_close(hvd.allreduce(x, op=hvd.Product), torch.tensor([2.0, 8.0]), msg="allreduce product")
    assert_close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), torch.tensor([3.0, 6.0]))
    assert_close(hvd.allreduce(x, compression=hvd.Compression.fp16), torch.tensor([1.5, 3.0]), msg="fp16")
    assert hvd.allreduce(torch.tensor([rank + 2])).tolist() == [2], "integer average rounds down: (2 + 3) // 2"
    y = x.clone()
    assert hvd.allreduce_(y, op=hvd.Sum) is y and y.tolist() == [3.0, 6.0], "allreduce_ works in place"
    handle = hvd.allreduce_async(x, op=hvd.Sum)
    out = hvd.synchronize(handle)
    assert_close(out, torch.tensor([3.0, 6.0]), msg="allreduce_async")
    assert hvd.poll(hvd.allreduce_async_(x.clone())) in (True, False)
    w = x.clone().requires_grad_(True)
    (hvd.allreduce(w, op=hvd.Sum) * torch.tensor([1.0, 10.0])).sum().backward()
    # Each rank's loss is weights . (x0 + x1); summed over ranks, d/dx_r = 2 * weights.
    assert_close(w.grad, torch.tensor([2.0, 20.0]), msg="allreduce is differentiable")
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce(x, op=hvd.Adasum)


def _check_grouped_and_gather(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    floats, ints = torch.full((2, 2), float(rank + 1)), torch.tensor([rank, 10])
    reduced = hvd.grouped_allreduce([floats, ints], op=hvd.Sum)
    assert_close(reduced[0], torch.full((2, 2), 3.0), msg="grouped_allreduce floats")
    assert reduced[1].tolist() == [1, 20] and reduced[1].dtype == torch.int64, "grouped_allreduce ints"
    in_place = [floats.clone(), ints.clone()]
    assert hvd.grouped_allreduce_(in_place, op=hvd.Sum)[0] is in_place[0] and in_place[1].tolist() == [1, 20]
    # Ranks hold different numbers of rows: rank 0 one row, rank 1 two.
    rows = torch.arange(rank + 1, dtype=torch.float32).unsqueeze(1) + 10 * rank
    assert hvd.allgather(rows).tolist() == [[0.0], [10.0], [11.0]], "allgather of uneven rows"
    assert hvd.allgather(torch.tensor(rank)).tolist() == [0, 1], "allgather of scalars"
    # Gradients, as Horovod defines them: the ranks' gradients averaged, each rank taking its own rows.
    mine = torch.full((rank + 1, 1), float(rank + 1), requires_grad=True)
    (hvd.allgather(mine) * torch.tensor([[1.0], [2.0], [3.0]]) * (rank + 1)).sum().backward()
    assert mine.grad.squeeze(1).tolist() == ([1.5] if rank == 0 else [3.0, 4.5]), f"allgather grad: {mine.grad}"
    root_value = torch.tensor([1.0, 1.0], requires_grad=True)
    (hvd.broadcast(root_value, root_rank=0) * torch.tensor([1.0, 2.0]) * (rank + 1)).sum().backward()
    assert root_value.grad.tolist() == ([1.5, 3.0] if rank == 0 else [0.0, 0.0]), f"broadcast grad: {root_value.grad}"


def _check_broadcast_alltoall_reducescatter(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    assert hvd.broadcast(torch.tensor([rank, rank]), root_rank=1).tolist() == [1, 1], "broadcast from rank 1"
    z = torch.tensor([float(rank)])
    assert hvd.broadcast_(z, root_rank=0) is z and z.tolist() == [0.0], "broadcast_ in place"
    # Equal shares: rank r sends row j to rank j.
    sent = torch.tensor([[10 * rank + 0], [10 * rank + 1]])
    assert hvd.alltoall(sent).tolist() == [[rank], [10 + rank]], "alltoall, equal splits"
    # Uneven splits: rank 0 sends 1 row to 0 and 2 to 1; rank 1 sends 0 to 0 and 1 to 1.
    splits = [1, 2] if rank == 0 else [0, 1]
    data = torch.arange(sum(splits)) + 100 * rank
    output, received = hvd.alltoall(data, splits=splits)
    expected = ([0], [1, 0]) if rank == 0 else ([1, 2, 100], [2, 1])
    assert (output.tolist(), received.tolist()) == expected, f"alltoall with splits: {output}, {received}"
    # 5 rows over 2 ranks: rank 0 gets rows 0-2, rank 1 rows 3-4 (Horovod's split).
    table = torch.arange(5, dtype=torch.float32).unsqueeze(1) * (rank + 1)
    mine = hvd.reducescatter(table, op=hvd.Sum)
    assert mine.squeeze(1).tolist() == ([0.0, 3.0, 6.0] if rank == 0 else [9.0, 12.0]), f"reducescatter: {mine}"
    assert_close(hvd.reducescatter(table)[0], (torch.tensor([0.0]) if rank == 0 else torch.tensor([4.5])))


def _check_objects_and_sets(hvd, rank: int) -> dict:  # type: ignore[no-untyped-def]
    obj = {"epoch": 3, 7: (1.5, "x", None), "w": torch.arange(3), "raw": b"\x00\x01"} if rank == 1 else None
    received = hvd.broadcast_object(obj, root_rank=1)
    assert received["epoch"] == 3 and received[7] == (1.5, "x", None) and received["raw"] == b"\x00\x01"
    assert received["w"].tolist() == [0, 1, 2]
    assert hvd.allgather_object({"rank": rank}) == [{"rank": 0}, {"rank": 1}]
    # An object that would need pickle is refused on the root; the peer is told instead of waiting.
    expected = TypeError if rank == 0 else RuntimeError
    with pytest.raises(expected, match="pickle" if rank == 0 else "could not encode"):
        hvd.broadcast_object(object() if rank == 0 else None, root_rank=0)
    hvd.barrier()
    last = hvd.join()
    solo = hvd.add_process_set([0])  # every rank registers it; only rank 0 is a member
    if rank == 0:
        assert hvd.allreduce(torch.tensor([5.0]), op=hvd.Sum, process_set=solo).tolist() == [5.0]
        assert solo.size() == 1 and solo.rank() == 0 and solo.included()
    else:
        assert not solo.included() and solo.rank() == -1
        with pytest.raises(ValueError, match="not a member"):
            hvd.allreduce(torch.tensor([5.0]), process_set=solo)
    return {"last_joined": last}


def _check_sync_batch_norm(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    for affine in (True, False):
        torch.manual_seed(0)
        full = torch.randn(8, 3, 2, 2)
        reference = torch.nn.BatchNorm2d(3, affine=affine)
        synced = hvd.SyncBatchNorm(3, affine=affine)
        if affine:
            with torch.no_grad():
                reference.weight.copy_(torch.tensor([1.0, 2.0, 3.0]))
                synced.weight.copy_(reference.weight)
        x_full = full.clone().requires_grad_(True)
        ref_out = reference(x_full)
        # Mean over the global batch of a rank-dependent weighting, split as the ranks' summed losses.
        weights = torch.linspace(-1, 1, ref_out.numel()).view_as(ref_out)
        (ref_out * weights).sum().backward()
        x = full[4 * rank : 4 * rank + 4].clone().requires_grad_(True)
        out = synced(x)
        (out * weights[4 * rank : 4 * rank + 4]).sum().backward()
        case = f"SyncBatchNorm(affine={affine})"
        assert_close(out, ref_out[4 * rank : 4 * rank + 4].detach(), msg=f"{case} output", atol=1e-5, rtol=1e-5)
        assert_close(x.grad, x_full.grad[4 * rank : 4 * rank + 4], msg=f"{case} input gradient", atol=1e-5,
                     rtol=1e-5)
        if affine:
            assert_close(hvd.allreduce(synced.weight.grad, op=hvd.Sum), reference.weight.grad, msg="weight gradient")
            assert_close(hvd.allreduce(synced.bias.grad, op=hvd.Sum), reference.bias.grad, msg="bias gradient")
        assert_close(synced.running_mean, reference.running_mean, msg=f"{case} running mean")
        assert_close(synced.running_var, reference.running_var, msg=f"{case} running var (unbiased)")


STEPS, GLOBAL_BATCH = 4, 8
VARIANTS = {  # name: (compression, backward_passes_per_step, tolerance)
    "plain": ("none", 1, 1e-5),
    "fp16": ("fp16", 1, 1e-3),
    "two_backward_passes": ("none", 2, 1e-5),
    # zero_grad(set_to_none=False): backward accumulates into the gradients that are views of the fused buffer.
    "gradients_kept_as_zeros": ("none", 1, 1e-5),
}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, GLOBAL_BATCH, 5, generator=generator), torch.randint(0, 3, (STEPS, GLOBAL_BATCH),
                                                                                    generator=generator)


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)


def _reference() -> dict[str, torch.Tensor]:
    model, (x, y) = _model(), _data()
    optimizer = _sgd(model)
    for step in range(STEPS):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[step]), y[step]).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _train(hvd, rank: int, variant: str) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    compression, passes, _ = VARIANTS[variant]
    model, (x, y) = _model(), _data()
    optimizer = hvd.DistributedOptimizer(
        _sgd(model), named_parameters=model.named_parameters(), compression=getattr(hvd.Compression, compression),
        backward_passes_per_step=passes)
    half = GLOBAL_BATCH // 2
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=variant != "gradients_kept_as_zeros")
        mine_x, mine_y = x[step, rank * half : (rank + 1) * half], y[step, rank * half : (rank + 1) * half]
        for micro_x, micro_y in zip(mine_x.chunk(passes), mine_y.chunk(passes)):
            (nn.functional.cross_entropy(model(micro_x), micro_y) / passes).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _broadcast_state(hvd, rank: int) -> dict:  # type: ignore[no-untyped-def]
    torch.manual_seed(100 + rank)  # every rank starts from different weights and optimizer state
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1), betas=(0.8, 0.95))
    for _ in range(rank + 1):  # different step counts and moments
        model(torch.randn(6, 4)).pow(2).mean().backward()
        optimizer.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    fresh = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1 * (rank + 1), momentum=0.5)
    hvd.broadcast_optimizer_state(fresh, root_rank=1)  # before any step: no per-parameter state yet
    return {"weights": {k: v.clone() for k, v in model.state_dict().items()},
            "adam": optimizer.state_dict(), "sgd_lr": fresh.param_groups[0]["lr"]}


def _check_parameter_unused_on_one_rank(hvd, rank: int) -> None:  # type: ignore[no-untyped-def]
    # Rank 1 never touches `second`: its all-reduce must still be matched (with zeros), in the same order.
    first, second = nn.Linear(2, 1, bias=False), nn.Linear(2, 1, bias=False)
    parameters = [("first", first.weight), ("second", second.weight)]
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD([first.weight, second.weight], lr=0.1),
                                         named_parameters=parameters)
    x = torch.tensor([[1.0, 2.0]])
    loss = first(x).sum() + (second(x).sum() if rank == 0 else 0.0)
    loss.backward()
    optimizer.synchronize()
    assert first.weight.grad.tolist() == [[1.0, 2.0]], "used on both ranks: the average of equal gradients"
    assert second.weight.grad.tolist() == [[0.5, 1.0]], "used on rank 0 only: averaged with rank 1's zeros"


def _worker_horovod(rank: int, world_size: int) -> dict:
    import stratagem.horovod as hvd

    hvd.init()
    try:
        layout = {"size": hvd.size(), "rank": hvd.rank(), "local_size": hvd.local_size(),
                  "local_rank": hvd.local_rank(), "cross_size": hvd.cross_size(), "cross_rank": hvd.cross_rank()}
        _check_allreduce(hvd, rank)
        _check_grouped_and_gather(hvd, rank)
        _check_broadcast_alltoall_reducescatter(hvd, rank)
        _check_sync_batch_norm(hvd, rank)
        layout |= _check_objects_and_sets(hvd, rank)
        _check_parameter_unused_on_one_rank(hvd, rank)
        trained = {name: _train(hvd, rank, name) for name in VARIANTS}
        # Tensors go back as NumPy arrays: a tensor would travel as shared memory that dies with the worker.
        return _to_numpy({"layout": layout, "trained": trained, "broadcast": _broadcast_state(hvd, rank)})
    finally:
        hvd.shutdown()


def _to_numpy(value):  # type: ignore[no-untyped-def]
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_numpy(v) for v in value)
    return value


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return run_workers(_worker_horovod, world_size=2, timeout_s=100)


def test_every_collective_in_two_processes_gives_horovods_values(results: list[dict]) -> None:
    for rank, result in enumerate(results):
        layout = result["layout"]
        assert layout["size"] == 2 and layout["rank"] == rank
        assert (layout["local_size"], layout["local_rank"]) == (2, rank)
        assert (layout["cross_size"], layout["cross_rank"]) == (1, 0)
    # Both ranks agree on which one joined last.
    assert results[0]["layout"]["last_joined"] == results[1]["layout"]["last_joined"] in (0, 1)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_two_processes_match_one_process_on_the_global_batch(results: list[dict], variant: str) -> None:
    tolerance = VARIANTS[variant][2]
    reference = _reference()
    initial = _model().state_dict()
    for result in results:
        weights = result["trained"][variant]
        for name, value in reference.items():
            assert not torch.allclose(value, initial[name]), "training moved the weights"
            assert_close(torch.from_numpy(weights[name]), value, rtol=tolerance, atol=tolerance, msg=f"{variant}: {name}")


def test_broadcast_gives_every_rank_root_weights_and_optimizer_state(results: list[dict]) -> None:
    root, other = results[0]["broadcast"], results[1]["broadcast"]
    for name, value in root["weights"].items():
        assert (other["weights"][name] == value).all(), name
    assert other["adam"]["param_groups"] == root["adam"]["param_groups"]  # lr, betas (a tuple), step counts ...
    assert root["adam"]["param_groups"][0]["lr"] == 0.01 and root["adam"]["param_groups"][0]["betas"] == (0.8, 0.95)
    for index, slots in root["adam"]["state"].items():
        for slot, value in slots.items():
            assert (other["adam"]["state"][index][slot] == value).all(), f"{index}/{slot}"
    assert root["adam"]["state"][0]["step"] == 1.0
    assert [r["broadcast"]["sgd_lr"] for r in results] == [0.2, 0.2]
