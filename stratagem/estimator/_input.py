"""Calling an Estimator ``input_fn`` on each replica, as TF's Estimator does under a strategy.

An ``input_fn`` returns per-replica batches. One that takes ``input_context`` shards itself; otherwise replica ``r``
of ``N`` takes batches ``r, r + N, ...``: what TF's in-process ``MirroredStrategy`` hands replica ``r`` of one shared
pipeline, so N replicas see what one would on N consecutive batches.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

from stratagem.data.dataset import Dataset
from stratagem.distribute.input_context import InputContext

_OPTIONAL_ARGS = ("mode", "params", "config", "input_context")


def call_input_fn(input_fn: Callable[..., Any], context: InputContext, **available: Any) -> Dataset:
    """``input_fn`` called with the arguments it names, sharded for this replica unless it took ``input_context``."""
    try:
        accepted = inspect.signature(input_fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: call it bare
        accepted = {}  # type: ignore[assignment]
    available["input_context"] = context
    kwargs = {name: available[name] for name in _OPTIONAL_ARGS if name in accepted}
    dataset = input_fn(**kwargs)
    if not isinstance(dataset, Dataset):
        raise TypeError(
            "input_fn must return a stratagem.data.Dataset of (features, labels) batches (TF also took a tuple of "
            "tensors, which has no batches to step through here). Wrap tensors in Dataset.from_tensor_slices(...)"
            f".batch(n). Received: {type(dataset).__name__}")
    if "input_context" in accepted or context.num_input_pipelines == 1:
        return dataset
    return shard_batches(dataset, context.num_input_pipelines, context.input_pipeline_id)


def shard_batches(dataset: Dataset, num_shards: int, index: int) -> Dataset:
    """Batches ``index, index + num_shards, ...``; a finite pipeline first drops the batches that would leave replicas uneven."""
    cardinality = dataset.cardinality()
    if cardinality >= 0 and cardinality % num_shards:
        # NOTE: an uneven count would give one replica a step more than another, and its
        # all-reduce would wait for a partner that never comes.
        kept = cardinality - cardinality % num_shards
        warnings.warn(f"The input has {cardinality} batches, not a multiple of the {num_shards} replicas: the last "
                      f"{cardinality - kept} are dropped so every replica runs the same steps.", stacklevel=3)
        dataset = dataset.take(kept)
    return dataset.shard(num_shards, index)
