"""MultiWorkerMirroredStrategy from TF_CONFIG: two workers match one replica."""

from __future__ import annotations

import json
import os

import pytest
import torch

import stratagem
from stratagem.launcher.ports import find_free_port
from stratagem.testing import run_workers
from tests.dist._models import classification_data, small_cnn, state_as_numpy

pytestmark = pytest.mark.dist

GLOBAL_BATCH = 12
NUM_SAMPLES = GLOBAL_BATCH * 20


def _train() -> dict:
    x, y = classification_data(NUM_SAMPLES, seed=5)
    model = stratagem.Model(small_cnn())
    model.compile(optimizer=stratagem.optimizers.SGD(learning_rate=0.05, momentum=0.9), 
                  loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return state_as_numpy(model.module)


def _worker_tf_config(rank: int, world_size: int, ports: list[int]) -> dict:
    # TF-style: each process gets its own TF_CONFIG; chief + one worker.
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    task = {"type": "chief", "index": 0} if rank == 0 else {"type": "worker", "index": 0}
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}, "task": task,
    })
    strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        state = _train()
    resolver = strategy.cluster_resolver
    return {"state": state, "replicas": strategy.num_replicas_in_sync, "task_type": resolver.task_type,
            "is_chief": strategy.is_chief}


def test_tf_config_workers_match_one_replica() -> None:
    ports = [find_free_port(), find_free_port()]
    results = run_workers(_worker_tf_config, world_size=2, args=(ports,), timeout_s=90)
    expected = _train()
    assert [r["task_type"] for r in results] == ["chief", "worker"]
    assert [r["is_chief"] for r in results] == [True, False]
    for result in results:
        assert result["replicas"] == 2
        for name, value in expected.items():
            torch.testing.assert_close(torch.from_numpy(result["state"][name]), torch.from_numpy(value), rtol=0, atol=1e-5)
