"""``DistributedDataset``: what ``experimental_distribute_dataset`` returns.

With ``split_batches=True`` every process iterates the same global batches
and keeps its contiguous share of rows (tf.data's ``DATA`` auto-shard
policy), so each example of a batch goes to exactly one replica, including in
a short last batch. With ``split_batches=False`` the wrapped pipeline already
yields this replica's batches (``distribute_datasets_from_function``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from stratagem._nest import batch_size_of, map_structure
from stratagem.distribute.input_context import InputContext, check_global_batch_size, replica_slice


class DistributedDataset:
    """Iterates this replica's batches of a dataset.

    Args:
        dataset: An iterable of batches (tensors, numpy arrays, or tuples and
            dicts of them).
        input_context: This process's ``InputContext``.
        split_batches: Whether ``dataset`` yields global batches to split.
    """

    def __init__(self, dataset: Iterable[Any], *, input_context: InputContext, split_batches: bool) -> None:
        self._dataset = dataset
        self._context = input_context
        self._split = split_batches

    def __iter__(self) -> Iterator[Any]:
        for local, _ in self.iter_with_global_batch_size():
            yield local

    def iter_with_global_batch_size(self) -> Iterator[tuple[Any, int]]:
        """Yields ``(this replica's batch, examples in the step on all replicas)``."""
        replicas = self._context.num_replicas_in_sync
        first = True
        for batch in self._dataset:
            batch = map_structure(_as_tensor, batch)
            size = batch_size_of(batch)
            if not self._split:
                # Each replica's pipeline yields its own batch: tf.distribute's
                # rule is that the global batch is the per-replica one times N.
                yield batch, size * replicas
                continue
            if first:
                # Only the first batch must divide; a short final batch is
                # split as evenly as possible so no example is dropped.
                check_global_batch_size(size, replicas)
                first = False
            rows = replica_slice(size, replicas, self._context.input_pipeline_id)
            yield map_structure(lambda t: t[rows], batch), size

    def __len__(self) -> int:
        return len(self._dataset)  # type: ignore[arg-type]


def _as_tensor(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            tensor = torch.from_numpy(value)
            return tensor.to(torch.get_default_dtype()) if tensor.is_floating_point() else tensor
    except ImportError:  # numpy is a dependency; this only guards odd installs
        pass
    return value
