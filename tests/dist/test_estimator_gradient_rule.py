"""An Estimator's model_fn trains with fit's gradient rule: an uneven last batch on two replicas matches one replica.

The input_fn gives each replica its own batches of 4 (replica r takes batches r, r+2, ...),
over 14 examples: the second step holds 4 rows on replica 0 and 2 on replica 1. One replica
on batches of 8 sees the same 8 and then 6 examples. Each replica's loss (model_fn's batch
mean) weighs its rows over the step's 6, and the gradients are summed, so the two must
agree; averaging the two replicas' mean gradients (the old rule) gives another update,
which the parent checks too, so the comparison can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.estimator import Estimator, EstimatorSpec, RunConfig
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist

EXAMPLES, LR = 14, 0.5


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(EXAMPLES, 6)).astype(np.float32)
    return x, (x[:, :3].argmax(axis=1)).astype(np.int64)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(6, 3)


def _train(model_dir: str, batch_size: int, strategy: object = None) -> dict[str, np.ndarray]:
    net = _net()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)

    def model_fn(features, labels, mode, params, config):  # type: ignore[no-untyped-def]
        return EstimatorSpec(mode, loss=nn.functional.cross_entropy(net(features), labels), train_op=optimizer,
                             scaffold=net)

    x, y = _data()
    estimator = Estimator(model_fn, model_dir=model_dir, config=RunConfig(train_distribute=strategy))
    estimator.train(lambda: stratagem.data.Dataset.from_tensor_slices((x, y)).batch(batch_size))
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def _worker(rank: int, world_size: int, model_dir: str) -> dict[str, np.ndarray]:
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    return _train(model_dir, batch_size=4, strategy=strategy)


def _mean_of_means_update() -> dict[str, np.ndarray]:
    """The old rule by hand: each replica's mean-loss gradient, averaged over the two replicas."""
    net = _net()
    x, y = (torch.as_tensor(a) for a in _data())
    for shares in ([slice(0, 4), slice(4, 8)], [slice(8, 12), slice(12, 14)]):
        grads = []
        for rows in shares:
            net.zero_grad()
            nn.functional.cross_entropy(net(x[rows]), y[rows]).backward()
            grads.append([p.grad.clone() for p in net.parameters()])
        with torch.no_grad():
            for p, *per_replica in zip(net.parameters(), *grads):
                p -= LR * sum(per_replica) / len(per_replica)
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def test_uneven_last_batch_on_two_replicas_matches_one_replica_on_the_global_batches(tmp_path) -> None:
    results = run_workers(_worker, world_size=2, args=(str(tmp_path / "two"),), timeout_s=100)
    reference = _train(str(tmp_path / "one"), batch_size=8)
    old_rule = _mean_of_means_update()
    assert max(float(np.abs(old_rule[k] - reference[k]).max()) for k in reference) > 1e-3  # the case discriminates
    for rank, result in enumerate(results):
        for name, expected in reference.items():
            np.testing.assert_allclose(result[name], expected, rtol=0, atol=1e-6, err_msg=f"rank {rank}: {name}")
