"""ShardedDataParallelStrategy without processes: its export and its cluster checks."""

from __future__ import annotations

import pytest

import stratagem


def test_sharded_strategy_is_exported_under_keras_words() -> None:
    assert stratagem.ShardedDataParallelStrategy is stratagem.distribute.ShardedDataParallelStrategy
    strategy = stratagem.distribute.ShardedDataParallelStrategy()  # no cluster: one replica, no process group
    assert strategy.num_replicas_in_sync == 1
    assert isinstance(strategy, stratagem.distribute.ShardsVariables)


def test_tf_config_with_ps_tasks_raises_configuration_error_naming_the_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cluster comes from TF_CONFIG as for MultiWorkerMirroredStrategy, checked before any process group.
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, '
                                    '"task": {"type": "worker", "index": 0}}')
    with pytest.raises(stratagem.errors.ConfigurationError, match="ShardedDataParallelStrategy does not use.*Received:"):
        stratagem.distribute.ShardedDataParallelStrategy()
