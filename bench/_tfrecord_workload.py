"""The TFRecord workload that ``bench_tfrecord.py`` times, written once for both libraries.

``pipeline`` is tf.data's recommended reader, written against module arguments so
the same lines run on ``tf.data``/``tf.io`` and on ``stratagem.data``/``stratagem.io``.
Run as a script with TensorFlow's Python, it times the TF side on a folder the bench
wrote (``python _tfrecord_workload.py DIR REPEATS`` prints JSON); nothing here
imports stratagem at module level, so that TF's environment needs none of it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

NUM_FILES = 8
RECORDS_PER_FILE = 12_500
BATCH_SIZE = 256
IMAGE_BYTES = 28 * 28
DENSE = 16
WARMUP_BATCHES = 5
SEED = 0


def write_files(directory: Path) -> list[str]:
    """``NUM_FILES`` TFRecord files of tf.train.Example records (raw uint8 image, int64 label, 16 floats)."""
    import numpy as np

    from stratagem.io import TFRecordWriter
    from stratagem.train import BytesList, Example, Feature, Features, FloatList, Int64List

    rng = np.random.default_rng(SEED)
    paths = []
    for index in range(NUM_FILES):
        path = directory / f"train-{index:05d}-of-{NUM_FILES:05d}.tfrecord"
        images = rng.integers(0, 256, size=(RECORDS_PER_FILE, IMAGE_BYTES), dtype=np.uint8)
        dense = rng.random((RECORDS_PER_FILE, DENSE), dtype=np.float32)
        with TFRecordWriter(str(path)) as writer:
            for row in range(RECORDS_PER_FILE):
                example = Example(features=Features(feature={
                    "image": Feature(bytes_list=BytesList(value=[images[row].tobytes()])),
                    "label": Feature(int64_list=Int64List(value=[(index * RECORDS_PER_FILE + row) % 10])),
                    "dense": Feature(float_list=FloatList(value=dense[row].tolist())),
                }))
                writer.write(example.SerializeToString())
        paths.append(str(path))
    return paths


def pipeline(data: Any, io: Any, dtype: Any, files: list[str]) -> Any:
    """tf.data's guide pipeline: parallel reads, batch, parse_example + decode_raw in map(AUTOTUNE), prefetch."""
    spec = {"image": io.FixedLenFeature([], dtype("string")), "label": io.FixedLenFeature([], dtype("int64")),
            "dense": io.FixedLenFeature([DENSE], dtype("float32"))}

    def parse(records: Any) -> Any:
        parsed = io.parse_example(records, spec)
        parsed["image"] = io.decode_raw(parsed["image"], dtype("uint8"))
        return parsed

    autotune = data.AUTOTUNE
    return (data.TFRecordDataset(files, num_parallel_reads=autotune).batch(BATCH_SIZE)
            .map(parse, num_parallel_calls=autotune).prefetch(autotune))


def time_epochs(make: Any, repeats: int) -> list[float]:
    """Records per second of ``repeats`` full epochs, each of a fresh pipeline after a 5-batch warm-up."""
    rates = []
    for _ in range(repeats):
        warm = iter(make())
        for _ in range(WARMUP_BATCHES):
            next(warm)
        del warm
        dataset = make()
        start, count = time.perf_counter(), 0
        for batch in dataset:
            count += int(batch["image"].shape[0])  # touches the decoded images' batch
        rates.append(count / (time.perf_counter() - start))
        if count != NUM_FILES * RECORDS_PER_FILE:
            raise AssertionError(f"an epoch gave {count} records, expected {NUM_FILES * RECORDS_PER_FILE}")
    return rates


def stratagem_rates(files: list[str], repeats: int) -> list[float]:
    import stratagem.data
    import stratagem.io

    return time_epochs(lambda: pipeline(stratagem.data, stratagem.io, str, files), repeats)


def _tensorflow_main(directory: str, repeats: int) -> None:
    import tensorflow as tf

    files = sorted(str(p) for p in Path(directory).glob("train-*.tfrecord"))
    rates = time_epochs(lambda: pipeline(tf.data, tf.io, tf.dtypes.as_dtype, files), repeats)
    print(json.dumps({"tensorflow": tf.__version__, "rates": rates}))


if __name__ == "__main__":
    _tensorflow_main(sys.argv[1], int(sys.argv[2]))
