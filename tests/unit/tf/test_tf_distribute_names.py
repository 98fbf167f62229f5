"""tf.distribute's names on one process: TF's constructor arguments, contexts, and the TPU refusal."""

from __future__ import annotations

import pytest
import torch

import stratagem
import stratagem.tf as tf
from stratagem.errors import ConfigurationError


def test_tpu_strategy_and_resolver_refuse_saying_tpus_are_not_supported() -> None:
    with pytest.raises(ConfigurationError, match="TPUs are not supported"):
        tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    with pytest.raises(ValueError, match="TPUs are not supported.*MirroredStrategy"):
        tf.distribute.TPUStrategy(None)  # a ValueError, as TF's on a machine without TPUs: fall-backs still work
    with pytest.raises(ValueError, match="TPUs are not supported"):
        tf.distribute.experimental.TPUStrategy()


def test_unknown_names_raise_attribute_error_naming_them() -> None:
    with pytest.raises(AttributeError, match="tf.distribute.NoSuchStrategy"):
        tf.distribute.NoSuchStrategy
    with pytest.raises(AttributeError, match="tf.distribute.experimental.NoSuchThing"):
        tf.distribute.experimental.NoSuchThing
    with pytest.raises(AttributeError, match="stratagem run --ps"):
        tf.distribute.Server
    with pytest.raises(AttributeError, match="tf.train.Checkpoint"):
        tf.train.Saver


def test_mirrored_strategy_accepts_cross_device_ops_with_one_warning() -> None:
    with pytest.warns(UserWarning, match="torch.distributed picks the all-reduce algorithm"):
        strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0"], cross_device_ops=tf.distribute.NcclAllReduce())
    assert strategy.num_replicas_in_sync == 1
    for ops in (tf.distribute.HierarchicalCopyAllReduce(num_packs=2), tf.distribute.ReductionToOneDevice()):
        with pytest.warns(UserWarning):
            tf.distribute.MirroredStrategy(cross_device_ops=ops)


def test_experimental_names_build_the_same_strategies() -> None:
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    assert options.implementation is tf.distribute.experimental.CollectiveCommunication.RING
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy(
        communication=tf.distribute.experimental.CollectiveCommunication.RING)
    assert isinstance(strategy, stratagem.distribute.MultiWorkerMirroredStrategy)
    assert strategy.num_replicas_in_sync == 1
    assert tf.distribute.cluster_resolver.TFConfigClusterResolver is stratagem.distribute.TFConfigClusterResolver
    assert tf.distribute.experimental.ParameterServerStrategy is tf.distribute.ParameterServerStrategy


def test_replica_context_inside_run_and_cross_replica_context_in_scope() -> None:
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert tf.distribute.get_replica_context() is not None  # outside every scope: the default replica context
    with strategy.scope():
        assert tf.distribute.get_replica_context() is None
        assert tf.distribute.in_cross_replica_context()

        def step() -> tuple:
            context = tf.distribute.get_replica_context()
            total = context.all_reduce(tf.distribute.ReduceOp.SUM, {"a": torch.tensor(2.0)})
            return tf.distribute.get_strategy(), context.replica_id_in_sync_group, total

        seen, replica_id, total = strategy.run(step)
    assert seen is strategy and replica_id == 0 and float(total["a"]) == 2.0
    assert not tf.distribute.has_strategy()


def test_reduce_with_and_without_axis_and_local_results() -> None:
    strategy = tf.distribute.OneDeviceStrategy("cpu")
    value = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    torch.testing.assert_close(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None), value)
    torch.testing.assert_close(strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=0), torch.tensor([2.0, 4.0]))
    nested = strategy.reduce("sum", {"loss": torch.tensor(1.5), "parts": [torch.tensor([1.0, 2.0])]}, axis=0)
    assert float(nested["loss"]) == 1.5 and float(nested["parts"][0]) == 3.0
    per_replica = strategy.run(lambda: torch.tensor(5.0))
    assert strategy.experimental_local_results(per_replica) == (per_replica,)
    wrapped = tf.distribute.PerReplica(torch.tensor(1.0))
    assert strategy.experimental_local_results(wrapped) == (wrapped.value,)
