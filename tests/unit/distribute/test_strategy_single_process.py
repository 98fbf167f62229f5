"""Strategy behaviour that needs no second process: defaults, scopes, options, errors."""

from __future__ import annotations

import pytest
import torch

import stratagem
import keras  # after stratagem (it sets KERAS_BACKEND), before any test: its import sets variables
from stratagem.distribute import CommunicationOptions, MirroredStrategy, OneDeviceStrategy, ReduceOp, get_strategy, has_strategy
from stratagem.distribute.one_device import parse_device
from stratagem.distribute.strategy import read_summed
from stratagem.errors import ConfigurationError


def test_outside_any_scope_default_strategy_has_one_replica() -> None:
    strategy = get_strategy()
    assert isinstance(strategy, OneDeviceStrategy)
    assert strategy.num_replicas_in_sync == 1 and strategy.is_chief
    assert not has_strategy()


def test_nested_scopes_restore_the_outer_strategy() -> None:
    outer, inner = OneDeviceStrategy(), OneDeviceStrategy()
    with outer.scope():
        with inner.scope():
            assert get_strategy() is inner
        assert get_strategy() is outer and has_strategy()
    assert get_strategy() is not outer


def test_single_replica_reduce_and_gather_are_identity_like() -> None:
    strategy = OneDeviceStrategy()
    values = torch.tensor([1.0, 2.0, 6.0])
    assert strategy.reduce("sum", values, axis=0).item() == 9.0
    assert strategy.reduce(ReduceOp.MEAN, values, axis=0).item() == 3.0
    assert strategy.reduce("max", values, axis=None).tolist() == [1.0, 2.0, 6.0]
    assert strategy.gather(values, axis=0).tolist() == [1.0, 2.0, 6.0]
    assert strategy.run(lambda a, b: a + b, args=(stratagem.distribute.PerReplica(values), 1)).tolist() == [2.0, 3.0, 7.0]


def test_unknown_reduce_op_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"'sum', 'mean', 'max', 'min'. Received: reduce_op='avg'"):
        OneDeviceStrategy().reduce("avg", torch.ones(1), axis=None)


@pytest.mark.parametrize(("name", "expected"), [
    ("cpu", torch.device("cpu")), ("/cpu:0", torch.device("cpu")), ("/gpu:1", torch.device("cuda", 1)),
    ("/job:worker/replica:0/task:0/device:GPU:0", torch.device("cuda", 0)), ("cuda:2", torch.device("cuda", 2)),
])
def test_tf_and_torch_device_names_parse(name: str, expected: torch.device) -> None:
    assert parse_device(name) == expected


def test_unknown_device_name_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Received: device='tpu:0'"):
        parse_device("tpu:0")


def test_mirrored_without_launch_and_self_launch_disabled_raises_with_fix() -> None:
    # conftest disables self-launch, so the strategy must explain how to launch.
    with pytest.raises(ConfigurationError, match=r"stratagem run -n 2 script.py.*Received: num_replicas=2"):
        MirroredStrategy(num_replicas=2)


def test_mirrored_with_one_replica_runs_in_process() -> None:
    strategy = MirroredStrategy(num_replicas=1)
    assert strategy.num_replicas_in_sync == 1 and strategy.device.type == "cpu"


def test_mirrored_launched_with_other_world_size_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match=r"asks for 2 replicas but the job was launched with 3.*Received: replicas=2, world_size=3"):
        MirroredStrategy(num_replicas=2)


def test_devices_and_num_replicas_together_raise() -> None:
    with pytest.raises(ValueError, match="not both"):
        MirroredStrategy(["cpu:0"], num_replicas=2)


def test_multi_worker_refuses_cluster_with_parameter_servers() -> None:
    resolver = stratagem.distribute.SimpleClusterResolver(
        stratagem.distribute.ClusterSpec({"worker": ["127.0.0.1:2001", "127.0.0.1:2002"], "ps": ["127.0.0.1:2003"]}),
        task_type="worker", task_id=0)
    with pytest.raises(ConfigurationError, match="ParameterServerStrategy"):
        stratagem.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


def test_timeout_comes_from_options_then_environment_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CommunicationOptions().resolved_timeout_s() == 300.0
    monkeypatch.setenv("STRATAGEM_TIMEOUT_S", "12")
    assert CommunicationOptions().resolved_timeout_s() == 12.0
    assert CommunicationOptions(timeout_seconds=3).resolved_timeout_s() == 3.0
    monkeypatch.setenv("STRATAGEM_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="Received: STRATAGEM_TIMEOUT_S='soon'"):
        CommunicationOptions().resolved_timeout_s()


def test_backend_follows_device_and_implementation() -> None:
    assert CommunicationOptions().backend("cpu") == "gloo"
    assert CommunicationOptions().backend("cuda") == "nccl"
    assert CommunicationOptions(implementation="ring").backend("cuda") == "gloo"
    with pytest.raises(ValueError, match="Received: implementation='mpi'"):
        CommunicationOptions(implementation="mpi")


class _TwoEqualReplicas:
    """What read_summed asks of a strategy, for two replicas holding the same states: a sum doubles them."""

    num_replicas_in_sync = 2
    device = torch.device("cpu")

    def reduce(self, op: ReduceOp, value: torch.Tensor, axis: int | None) -> torch.Tensor:
        return value * 2


def test_read_summed_result_that_is_a_state_keeps_the_summed_value() -> None:
    # A sum metric's result() may return its total itself; the put-back of the local state must not change it.
    total, count = torch.tensor(3.0, dtype=torch.float64), torch.tensor([1.0, 2.0])
    result = read_summed(_TwoEqualReplicas(), [total, count], lambda: {"total": total, "count": count[1]})  # type: ignore[arg-type]
    assert float(result["total"]) == 6.0 and float(result["count"]) == 4.0
    assert float(total) == 3.0 and count.tolist() == [1.0, 2.0]


def test_run_makes_keras_tensors_on_the_replicas_device_not_kerass_default() -> None:
    # Keras's default device is the GPU wherever there is one ("meta" stands in for it here): an optimizer's slots,
    # built at its first apply_gradients inside run, were made there while a CPU strategy's variables were not.
    strategy = OneDeviceStrategy("cpu")
    with keras.device("meta"):
        inside_run = strategy.run(lambda: keras.ops.ones(2).device)
        outside = keras.ops.ones(2).device
    assert (inside_run.type, outside.type) == ("cpu", "meta")
