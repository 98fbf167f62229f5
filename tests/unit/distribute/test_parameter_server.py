"""Parameter-server building blocks: partitioners, the wire format, servers on 127.0.0.1.

The servers run in this process (gRPC threads, loopback only); the message
tests send bytes straight to a server, as a broken or hostile client would.
"""

from __future__ import annotations

import contextvars
import json
import struct
from collections.abc import Iterator

import pytest
import torch

from stratagem.distribute.ps import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner, wire
from stratagem.distribute.ps.client import PSClient, ShardedVariables
from stratagem.distribute.ps.partitioners import shard_rows
from stratagem.distribute.ps.server import ParameterServer, optimizer_spec
from stratagem.errors import ParameterServerError

EMBEDDING = (10, 4)  # 160 bytes of float32; 16 per row


@pytest.mark.parametrize(("partitioner", "expected"), [
    (FixedShardsPartitioner(3), [3, 1]),
    (FixedShardsPartitioner(20), [10, 1]),           # never more shards than rows
    (MinSizePartitioner(min_shard_bytes=64, max_shards=8), [2, 1]),   # 160 // 64
    (MinSizePartitioner(min_shard_bytes=1000, max_shards=8), [1, 1]),
    (MaxSizePartitioner(max_shard_bytes=48), [4, 1]),  # 3 rows of 16 bytes per shard -> ceil(10 / 3)
    (MaxSizePartitioner(max_shard_bytes=48, max_shards=2), [2, 1]),
    (MaxSizePartitioner(max_shard_bytes=8), [10, 1]),  # a row is never split
])
def test_partitioners_follow_tensorflow(partitioner: object, expected: list[int]) -> None:
    assert partitioner(EMBEDDING, torch.float32) == expected  # type: ignore[operator]


def test_shard_rows_are_contiguous_and_cover_every_row() -> None:
    assert [list(r) for r in shard_rows(10, 4)] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


def test_invalid_partitioner_arguments_raise() -> None:
    with pytest.raises(ValueError, match="Received: num_shards=0"):
        FixedShardsPartitioner(0)


def test_wire_round_trip_keeps_bytes_exactly() -> None:
    tensors = {"w": torch.randn(3, 5), "ids": torch.arange(4), "flag": torch.tensor([True, False]),
               "empty": torch.zeros(0, 3), "half": torch.randn(2).to(torch.bfloat16)}
    decoded, meta = wire.decode(wire.encode(tensors, {"step": 7}))
    assert meta == {"step": 7}
    for name, tensor in tensors.items():
        assert decoded[name].dtype == tensor.dtype and torch.equal(decoded[name], tensor), name


@pytest.fixture()
def servers() -> Iterator[list[ParameterServer]]:
    started = [ParameterServer("127.0.0.1:0").start() for _ in range(3)]
    yield started
    for server in started:
        server.stop()


@pytest.mark.parametrize("partitioner", [FixedShardsPartitioner(3), MinSizePartitioner(64, max_shards=3),
                                         MaxSizePartitioner(max_shard_bytes=48)])
def test_embedding_split_over_three_servers_round_trips_exactly(servers: list[ParameterServer], partitioner: object) -> None:
    clients = [PSClient(s.address, timeout_s=10) for s in servers]
    variables = ShardedVariables(clients, partitioner)
    embedding, rate = torch.randn(*EMBEDDING), 0.1
    variables.create({"embedding": embedding})
    parts = partitioner(EMBEDDING, torch.float32)[0]  # type: ignore[operator]
    held = [sum(v.shape[0] for v in s._variables.values()) for s in servers]
    assert sum(held) == EMBEDDING[0] and len(variables.layout["embedding"]) == parts
    assert held == [sum(len(r) for i, r in enumerate(shard_rows(10, parts)) if i % 3 == k) for k in range(3)]
    assert torch.equal(variables.pull(["embedding"])[0]["embedding"], embedding)
    gradient = torch.randn(*EMBEDDING)
    variables.push({"embedding": gradient}, {"optimizer": {"class": "SGD", "hyper": {"lr": rate}}})
    assert torch.equal(variables.pull(["embedding"])[0]["embedding"], embedding.clone().sub_(gradient, alpha=rate))


def _raw(tensor_entries: list[dict], body: bytes, meta: dict | None = None) -> bytes:
    header = json.dumps({"tensors": tensor_entries, "meta": meta or {}}).encode()
    return struct.pack(">I", len(header)) + header + body


@pytest.mark.parametrize(("method", "message", "complaint"), [
    ("Push", wire.encode({"w": torch.zeros(2, 3, dtype=torch.float64)}), "is torch.float64[2, 3], but the variable is torch.float32"),
    ("Push", wire.encode({"w": torch.zeros(3, 2)}), "is torch.float32[3, 2], but the variable is torch.float32[2, 3]"),
    ("Push", wire.encode({"w": torch.zeros(2, 3)})[:-5], "truncated"),
    ("Push", wire.encode({"nope": torch.zeros(2, 3)}), "Unknown variable(s) ['nope']"),
    ("Pull", wire.encode({}, {"names": ["nope"]}), "Unknown variable(s) ['nope']"),
    ("Push", _raw([{"name": "w", "dtype": "complex64", "shape": [2, 3], "nbytes": 48}], bytes(48)), "unknown dtype"),
    ("Push", _raw([{"name": "w", "dtype": "float32", "shape": [2, 3], "nbytes": 12}], bytes(12)), "12 bytes declared"),
    ("Pull", b"\x00\x00\x00\x05{not", "Malformed message"),
    ("Push", wire.encode({"w": torch.zeros(2, 3)}, {"optimizer": {"class": "Lion", "hyper": {}}}), "meta.optimizer must be"),
    ("Push", wire.encode({"w": torch.zeros(2, 3)}, {"optimizer": {"class": "SGD", "hyper": {"lr": -1.0}}}), "lr must be non-negative"),
    ("Push", wire.encode({"w": torch.zeros(2, 3)}, {"optimizer": {"class": "SGD", "hyper": {"lr": "abc"}}}), "lr must be a number"),
    ("Push", wire.encode({"w": torch.zeros(2, 3)}, {"optimizer": {"class": "Adam", "hyper": {"betas": [0.9, 1.5]}}}),
     "Cannot build Adam"),
    ("Push", _raw([{"name": "w", "dtype": "float32", "shape": [0, 2**39, 2**39], "nbytes": 0}], b""), "too large for a tensor"),
    ("Push", wire.encode({"w": torch.zeros(2, 3)}, {"step": "seven"}), "meta.step must be"),
])
def test_malformed_message_gets_an_error_reply_and_server_keeps_serving(
        servers: list[ParameterServer], method: str, message: bytes, complaint: str) -> None:
    client = PSClient(servers[0].address, timeout_s=10)
    initial = torch.randn(2, 3)
    client.call("Create", {"w": initial}, {})
    with pytest.raises(ParameterServerError, match="refused") as caught:
        client.call_raw(method, message)
    assert complaint in str(caught.value)
    values, meta = client.call("Pull", {}, {"names": ["w"]})  # still serving, variable untouched
    assert torch.equal(values["w"], initial) and meta["version"] == 0
    assert servers[0].pushes_applied == 0


@pytest.mark.parametrize(("hyper", "complaint"), [
    ({"momentum": -5.0}, "momentum must be non-negative"), ({"lr": "abc"}, "lr must be a number"),
    ({"nesterov": True, "dampening": 0.5}, "Cannot build SGD"),
])
def test_nonsense_hyperparameters_for_an_existing_optimizer_are_refused(
        servers: list[ParameterServer], hyper: dict, complaint: str) -> None:
    client = PSClient(servers[0].address, timeout_s=10)
    client.call("Create", {"w": torch.zeros(3)}, {})
    momentum = {"class": "SGD", "hyper": {"lr": 0.1, "momentum": 0.9}}
    client.call("Push", {"w": torch.ones(3)}, {"optimizer": momentum})  # the server now holds an SGD
    with pytest.raises(ParameterServerError, match=complaint):
        client.call("Push", {"w": torch.ones(3)}, {"optimizer": {"class": "SGD", "hyper": {**momentum["hyper"], **hyper}}})
    client.call("Push", {"w": torch.ones(3)}, {"optimizer": momentum})
    # Two steps of SGD(0.1, momentum 0.9) on a gradient of ones, as if the refused push never came.
    torch.testing.assert_close(client.call("Pull", {}, {"names": ["w"]})[0]["w"], torch.full((3,), -0.1 - 0.19))
    assert servers[0].pushes_applied == 2


def test_unreachable_server_fails_within_deadline_naming_it() -> None:
    client = PSClient("127.0.0.1:9", timeout_s=1)  # nothing listens on the discard port here
    with pytest.raises(ParameterServerError, match=r"127\.0\.0\.1:9 did not answer Pull within 1s"):
        client.call("Pull", {}, {"names": ["w"]})


SGD = {"class": "SGD", "hyper": {"lr": 0.5}}


def test_a_step_is_applied_once_even_if_pushed_twice(servers: list[ParameterServer]) -> None:
    client = PSClient(servers[0].address, timeout_s=10)
    client.call("Create", {"w": torch.ones(3)}, {})
    first = client.call("Push", {"w": torch.ones(3)}, {"step": 7, "optimizer": SGD})[1]
    again = client.call("Push", {"w": torch.ones(3)}, {"step": 7, "optimizer": SGD})[1]
    assert first["applied"] and not again["applied"] and again["duplicate"]
    assert torch.equal(client.call("Pull", {}, {"names": ["w"]})[0]["w"], torch.full((3,), 0.5))
    stats = client.call("Stats", {}, {})[1]
    assert stats["applied_steps"] == [7] and stats["duplicates_refused"] == 1 and stats["pushes_applied"] == 1


def test_staleness_bound_drops_pushes_computed_from_old_values(servers: list[ParameterServer]) -> None:
    client = PSClient(servers[0].address, timeout_s=10)
    client.call("Create", {"w": torch.zeros(2)}, {})
    for step in range(3):  # the server moves to version 3
        client.call("Push", {"w": torch.ones(2)}, {"step": step, "optimizer": SGD})
    push = {"optimizer": SGD, "base_version": 1}
    dropped = client.call("Push", {"w": torch.ones(2)}, {**push, "step": 3, "staleness": 1})[1]  # 2 behind > 1
    assert dropped == {"applied": False, "stale": True, "version": 3}
    kept = client.call("Push", {"w": torch.ones(2)}, {**push, "step": 4, "staleness": 2})[1]  # 2 behind <= 2
    unbounded = client.call("Push", {"w": torch.ones(2)}, {**push, "step": 5})[1]
    assert kept["applied"] and unbounded["applied"]
    stats = client.call("Stats", {}, {})[1]
    assert stats["stale_dropped"] == 1 and stats["applied_steps"] == [0, 1, 2, 4, 5]


def test_server_adam_matches_local_adam_on_a_split_variable(servers: list[ParameterServer]) -> None:
    torch.manual_seed(0)
    initial = torch.randn(10, 4)
    variables = ShardedVariables([PSClient(s.address, timeout_s=10) for s in servers], FixedShardsPartitioner(3))
    variables.create({"w": initial})
    local = torch.nn.Parameter(initial.clone())
    optimizer = torch.optim.Adam([local], lr=0.1, betas=(0.8, 0.95))
    spec = optimizer_spec(optimizer)
    for step in range(5):
        grad = torch.randn(10, 4)
        local.grad = grad.clone()
        optimizer.step()
        variables.push({"w": grad}, {"step": step, "optimizer": spec})
    torch.testing.assert_close(variables.pull(["w"])[0]["w"], local.detach(), rtol=0, atol=1e-6)


def test_snapshot_restores_values_and_optimizer_state_exactly(servers: list[ParameterServer]) -> None:
    client = PSClient(servers[0].address, timeout_s=10)
    client.call("Create", {"w": torch.randn(4)}, {})
    adam = {"class": "Adam", "hyper": {"lr": 0.1}}
    client.call("Push", {"w": torch.randn(4)}, {"step": 0, "optimizer": adam})
    snapshot = client.call_bytes("Snapshot", wire.encode({}, {}))
    gradient = torch.randn(4)
    client.call("Push", {"w": gradient}, {"step": 1, "optimizer": adam})
    expected = client.call("Pull", {}, {"names": ["w"]})[0]["w"]
    other = PSClient(servers[1].address, timeout_s=10)  # a fresh server takes the snapshot
    other.call_bytes("Restore", snapshot)
    other.call("Push", {"w": gradient}, {"step": 1, "optimizer": adam})
    assert torch.equal(other.call("Pull", {}, {"names": ["w"]})[0]["w"], expected)
    with pytest.raises(ParameterServerError, match="Malformed message"):
        other.call_bytes("Restore", snapshot[:-3])


def test_run_without_a_cluster_coordinator_raises_like_tf(servers: list[ParameterServer]) -> None:
    from stratagem.distribute import ParameterServerStrategy, SimpleClusterResolver
    from stratagem.errors import ConfigurationError

    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": [servers[0].address]}
    strategy = ParameterServerStrategy(SimpleClusterResolver(cluster, task_type="chief", task_id=0))
    steps = []
    with pytest.raises(ConfigurationError, match=r"ClusterCoordinator\(strategy\).*Received: .*cluster_coordinator=None"):
        strategy.run(steps.append, args=(1,))
    assert steps == []  # the step never ran on the chief's local copy


def test_global_clipnorm_is_refused_because_no_server_sees_every_gradient(servers: list[ParameterServer]) -> None:
    from torch import nn

    from stratagem import optimizers
    from stratagem.distribute import ParameterServerStrategy, SimpleClusterResolver
    from stratagem.errors import ConfigurationError

    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": [servers[0].address]}
    strategy = ParameterServerStrategy(SimpleClusterResolver(cluster, task_type="chief", task_id=0))
    module = nn.Linear(3, 2)
    optimizer = optimizers.SGD(global_clipnorm=1.0).build(module.parameters(), torch.device("cpu"))
    with pytest.raises(ConfigurationError, match=r"clipnorm \(per variable\).*Received: global_clipnorm=1.0"):
        strategy.distribute_optimizer(optimizer)
    kept = optimizers.SGD(clipnorm=1.0).build(module.parameters(), torch.device("cpu"))
    assert strategy.distribute_optimizer(kept) is not kept  # per-variable clipping is what Keras does too


def test_pushes_in_a_scheduled_step_carry_its_id_and_the_versions_it_pulled(servers: list[ParameterServer]) -> None:
    from torch import nn

    from stratagem.distribute import ParameterServerStrategy, SimpleClusterResolver, context

    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": [servers[0].address]}
    chief, worker = (ParameterServerStrategy(SimpleClusterResolver(cluster, task_type=task, task_id=0), staleness=0)
                     for task in ("chief", "worker"))
    modules = [strategy.distribute_module(nn.Linear(2, 1, bias=False)) for strategy in (chief, worker)]
    optimizers = [strategy.distribute_optimizer(torch.optim.SGD(module.parameters(), lr=0.5))
                  for strategy, module in zip((chief, worker), modules)]

    def push(who: int) -> None:
        modules[who].weight.grad = torch.ones_like(modules[who].weight)
        optimizers[who].step()

    with worker.scheduled_step(7):
        assert context.scheduled_step_id() == 7
        push(1)  # applied: the server moves to version 1
        push(1)  # step 7 again (a re-run after a worker died): refused
    assert context.scheduled_step_id() is None
    with worker.scheduled_step(8):  # pulls version 1
        contextvars.Context().run(push, 0)  # another process's push, in no step: applied, version 2
        push(1)  # computed from version 1, one push behind: dropped under staleness=0
    stats = worker.variables.clients[0].call("Stats", {}, {})[1]
    assert stats["applied_steps"] == [7] and stats["duplicates_refused"] == 1
    assert stats["stale_dropped"] == 1 and stats["pushes_applied"] == 2
