"""Seed-shaped programs that trained wrong or died at exit (issue 21 item 6), each run as its users run it.

- A Keras 3 model under ``ShardedDataParallelStrategy`` on 2 replicas trains as one
  replica on the global batch (it did not train at all: Keras read its own
  variables, never FSDP's gathered parameters) and both processes exit 0.
- Seed 000's Mirrored snippet (parallel map + prefetch, the input runs out in the
  middle of training) trains and both processes exit 0 (they aborted at exit).
- ``ParameterServerStrategy`` fit on a ``stratagem.data`` Dataset with "accuracy"
  trains (it failed in the metric).
- Seed 004's Estimator snippet, ``RunConfig(train_distribute=...)`` without
  ``model_dir``, trains and evaluates on 2 replicas (rank 1's evaluate found no
  checkpoint: each replica had its own temporary ``model_dir``). run_workers'
  processes given a job secret, as ``stratagem run`` gives one.

The first two start each rank as its own interpreter (``stratagem run``): an abort
at interpreter exit is only seen there, not in run_workers' forked workers, which
leave through ``os._exit``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from stratagem.testing import run_workers
from stratagem.testing.ps_cluster import LocalPSCluster
from tests.dist._keras_models import images, train_seed_cnn  # imports Keras here, before a test watches os.environ
from tests.e2e._seed_examples import EXAMPLES, write_keras_home

pytestmark = pytest.mark.dist
SCRIPTS = Path(__file__).parent / "seed_scripts"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_parameter_server_fit_on_a_dataset_with_accuracy_trains(tmp_path: Path) -> None:
    out = tmp_path / "history.json"
    with LocalPSCluster(SCRIPTS / "ps_dataset_fit.py", num_workers=2, num_ps=1, log_dir=tmp_path,
                        args=(str(out),)) as cluster:
        assert cluster.wait("chief", 0, 100) == 0, cluster.logs()
    history = json.loads(out.read_text())
    assert len(history["loss"]) == 3
    assert history["loss"][-1] < 0.7 * history["loss"][0], history  # it learns: the loss falls
    assert history["accuracy"][-1] > 0.7, history  # four classes: chance is 0.25


def _launch_two(script: str | Path, out: Path, env: dict[str, str] | None = None) -> str:
    """``stratagem run -n 2 script out``; asserts it and both ranks exit 0 and nothing aborted; returns the output."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               STRATAGEM_TIMEOUT_S="60", **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "stratagem.launcher.cli", "run", "-n", "2", str(SCRIPTS / script),
                           str(out)], cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=100)
    assert proc.returncode == 0, proc.stdout[-4000:]
    for abort in ("terminate called", "Aborted", "core dumped", "exited with"):
        assert abort not in proc.stdout, proc.stdout[-4000:]
    return proc.stdout


@pytest.mark.timeout(150)
def test_keras_model_under_sharded_strategy_matches_one_replica_and_exits_0(tmp_path: Path) -> None:
    _launch_two("sharded_keras.py", tmp_path)
    sharded = np.load(tmp_path / "weights.npz")
    history = json.loads((tmp_path / "history.json").read_text())
    reference = train_seed_cnn("adam")  # one replica, the global batch
    assert sorted(sharded.files) == sorted(reference)
    for name, expected in reference.items():
        torch.testing.assert_close(sharded[name], expected, rtol=1e-5, atol=1e-5, msg=name)
    assert history["accuracy"][-1] > 0.2  # it trained (it stayed at chance, loss 2.30, before)
    assert history["moving_mean_max"] > 0.0  # BatchNormalization's statistics moved under the sharded call


@pytest.mark.timeout(150)
def test_seed_000_mirrored_snippet_whose_input_runs_out_exits_0(tmp_path: Path) -> None:
    # The seed's own file, whole: parallel map + prefetch, repeat(10) of 512-row global batches for 10 epochs of
    # len(x) // 256 steps, so the input runs out in epoch 6 (Keras warns). Both ranks aborted at exit (exit 134).
    # On the first 1,792 training digits, the fewest that still run out in epoch 6 (7 steps an epoch, 40 batches);
    # all 4,000 (15 steps, 80 batches) cost 33 s of CPU against 22 s.
    keras_home = write_keras_home(tmp_path / "keras_home", train_images=1792)
    output = _launch_two(EXAMPLES / "seed000_mirrored.py", tmp_path, env={"KERAS_HOME": str(keras_home)})
    epoch_6 = output.index("[rank 0] Epoch 6/10")
    for rank in (0, 1):  # in epoch 6, on both ranks
        assert re.search(rf"\[rank {rank}\] \S+ UserWarning: Your input ran out of data", output[epoch_6:]), \
            output[-3000:]


def _worker_seed_004_without_model_dir(rank: int, world_size: int) -> dict:
    import stratagem.tf as tf

    x, y = images(64)
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input(shape=(28, 28, 1))
    hidden = tf.keras.layers.Conv2D(filters=4, kernel_size=(3, 3), activation=tf.nn.relu)(inputs)
    outputs = tf.keras.layers.Dense(10, activation=tf.nn.softmax)(tf.keras.layers.Flatten()(hidden))
    model = tf.keras.Model(inputs=inputs, outputs=outputs)
    model.compile(loss="categorical_crossentropy", optimizer=tf.train.AdamOptimizer(learning_rate=0.001),
                  metrics=["accuracy"])
    strategy = tf.contrib.distribute.MirroredStrategy(num_gpus=2)
    config = tf.estimator.RunConfig(train_distribute=strategy)  # the seed's line: no model_dir
    estimator = tf.keras.estimator.model_to_estimator(model, config=config)
    labels = tf.keras.utils.to_categorical(y, 10).astype(np.float32)

    def input_fn(epochs: int) -> object:
        return tf.data.Dataset.from_tensor_slices((x, labels)).repeat(epochs).batch(8)

    estimator.train(input_fn=lambda: input_fn(10), steps=4)
    return {"model_dir": estimator.model_dir, "results": estimator.evaluate(lambda: input_fn(1))}


@pytest.mark.timeout(120)
def test_seed_004_estimator_without_model_dir_trains_and_evaluates_on_two_replicas() -> None:
    results = run_workers(_worker_seed_004_without_model_dir, 2, timeout_s=100,
                          env={"STRATAGEM_JOB_SECRET": os.urandom(16).hex()})
    assert results[0]["model_dir"] == results[1]["model_dir"], results  # the chief's checkpoints reach rank 1
    for result in results:
        assert result["results"]["global_step"] == 4, result
        assert 0.0 <= result["results"]["accuracy"] <= 1.0 and result["results"]["loss"] > 0, result
    assert results[0]["results"] == results[1]["results"]
