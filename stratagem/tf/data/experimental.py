"""``tf.data.experimental``: ``AUTOTUNE``, ``AutoShardPolicy``, the option classes (``OptimizationOptions`` too) and the fused ``apply`` ops."""

from __future__ import annotations

from typing import Any

from stratagem.data import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, AutoShardPolicy, Dataset
from stratagem.data.experimental import map_and_batch, shuffle_and_repeat
from stratagem.data.ops.counter import CounterDataset
from stratagem.data.options import AutotuneOptions, DistributeOptions, OptimizationOptions
from stratagem.tf._refusal import module_getattr


def cardinality(dataset: Dataset) -> int:
    """``tf.data.experimental.cardinality``: ``dataset.cardinality()``."""
    return dataset.cardinality()


def Counter(start: int = 0, step: int = 1, dtype: Any = None) -> Dataset:  # noqa: N802 (TF's name)
    """``tf.data.experimental.Counter``: the endless int64 count ``start, start + step, ...`` (other dtypes raise)."""
    if dtype is not None and getattr(dtype, "name", str(dtype).removeprefix("torch.")) != "int64":
        raise ValueError(f"Counter counts in int64 here; cast with map() for another dtype. Received: dtype={dtype!r}")
    return CounterDataset(start, step)


# TF 2.x keeps these older spellings of the Dataset methods.
sample_from_datasets = Dataset.sample_from_datasets
choose_from_datasets = Dataset.choose_from_datasets


__getattr__ = module_getattr("tf.data.experimental")
__all__ = [
    "AUTOTUNE", "AutoShardPolicy", "AutotuneOptions", "Counter", "DistributeOptions", "INFINITE_CARDINALITY",
    "OptimizationOptions", "UNKNOWN_CARDINALITY", "cardinality", "choose_from_datasets", "map_and_batch",
    "sample_from_datasets", "shuffle_and_repeat",
]
