"""Two TF_CONFIG workers fit on a folder of TFRecord files, sharded by file: each record seen once per epoch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.data import AUTOTUNE, AutoShardPolicy, Dataset, Options, TFRecordDataset
from stratagem.io import FixedLenFeature, TFRecordWriter, parse_example
from stratagem.launcher.ports import find_free_port
from stratagem.testing import run_workers
from stratagem.train import Example, Feature, Features, FloatList, Int64List

pytestmark = pytest.mark.dist

NUM_FILES, RECORDS_PER_FILE, GLOBAL_BATCH, EPOCHS = 4, 12, 4, 2
SPEC = {"id": FixedLenFeature([], "int64"), "x": FixedLenFeature([3], "float32"), "y": FixedLenFeature([], "int64")}


class _IdRecorder(nn.Module):
    """A linear classifier whose input carries each record's id in its last column; it notes the ids it sees."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(3, 2)
        self.seen: list[int] = []

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.seen += [int(v) for v in inputs[:, 3]]
        return self.linear(inputs[:, :3])


class _PerEpoch(stratagem.callbacks.Callback):
    def __init__(self, recorder: _IdRecorder) -> None:
        super().__init__()
        self.recorder, self.epochs = recorder, []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epochs.append(self.recorder.seen)
        self.recorder.seen = []


def _to_inputs(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    parsed = parse_example(records, SPEC)
    return np.concatenate([parsed["x"], parsed["id"][:, None].astype(np.float32)], axis=1), parsed["y"]


def _pipeline(directory: str) -> Dataset:
    # The TF tutorial's shape: list_files -> interleave(TFRecordDataset) -> shuffle -> batch -> parse.
    files = Dataset.list_files(str(Path(directory) / "train-*.tfrecord"), seed=3)
    records = files.interleave(lambda name: TFRecordDataset(name), cycle_length=2, num_parallel_calls=AUTOTUNE)
    ds = records.shuffle(8, seed=1).batch(GLOBAL_BATCH, drop_remainder=True).map(_to_inputs,
                                                                                  num_parallel_calls=AUTOTUNE)
    options = Options()
    options.experimental_distribute.auto_shard_policy = AutoShardPolicy.FILE
    return ds.with_options(options)


def _worker_fit(rank: int, world_size: int, ports: list[int], directory: str) -> dict:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]}, "task": {"type": "worker", "index": rank},
    })
    strategy = stratagem.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        recorder = _IdRecorder()
        model = stratagem.Model(recorder)
        model.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    per_epoch = _PerEpoch(recorder)
    model.fit(_pipeline(directory), epochs=EPOCHS, verbose=0, callbacks=[per_epoch])
    return {"epochs": per_epoch.epochs, "weight": recorder.linear.weight.detach().numpy().copy()}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("tfrecords")
    rng = np.random.default_rng(4)
    for f in range(NUM_FILES):
        with TFRecordWriter(str(directory / f"train-{f:05d}.tfrecord")) as writer:
            for i in range(RECORDS_PER_FILE):
                example = Example(features=Features(feature={
                    "id": Feature(int64_list=Int64List(value=[f * 100 + i])),
                    "x": Feature(float_list=FloatList(value=rng.normal(size=3).tolist())),
                    "y": Feature(int64_list=Int64List(value=[i % 2])),
                }))
                writer.write(example.SerializeToString())
    return str(directory)


def test_two_workers_fit_on_file_shards_see_each_record_once_per_epoch(folder: str) -> None:
    ports = [find_free_port(), find_free_port()]
    results = run_workers(_worker_fit, world_size=2, args=(ports, folder), timeout_s=100)
    every_id = sorted(f * 100 + i for f in range(NUM_FILES) for i in range(RECORDS_PER_FILE))
    for epoch in range(EPOCHS):
        first, second = results[0]["epochs"][epoch], results[1]["epochs"][epoch]
        assert not set(first) & set(second), f"epoch {epoch}: a record reached both workers"
        assert sorted(first + second) == every_id, f"epoch {epoch}: records lost or seen twice"
        # FILE sharding: each worker reads whole files, so a file's records all go to one worker.
        assert len({i // 100 for i in first}) == NUM_FILES // 2
    np.testing.assert_array_equal(results[0]["weight"], results[1]["weight"])  # the replicas stayed in sync
