"""InputContext arithmetic and the split of a global batch into replica shares."""

from __future__ import annotations

import pytest

from stratagem.distribute.input_context import InputContext, replica_slice
from stratagem.errors import ConfigurationError


def test_divisible_global_batch_gives_per_replica_share() -> None:
    ctx = InputContext(num_input_pipelines=4, input_pipeline_id=3, num_replicas_in_sync=4)
    assert ctx.get_per_replica_batch_size(64) == 16


def test_uneven_global_batch_raises_configuration_error() -> None:
    ctx = InputContext(num_input_pipelines=4, input_pipeline_id=0, num_replicas_in_sync=4)
    with pytest.raises(ConfigurationError, match=r"divisible by num_replicas_in_sync.*Received: global_batch_size=10, num_replicas_in_sync=4"):
        ctx.get_per_replica_batch_size(10)


def test_pipeline_id_out_of_range_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Received: input_pipeline_id=2"):
        InputContext(num_input_pipelines=2, input_pipeline_id=2, num_replicas_in_sync=2)


@pytest.mark.parametrize("batch_size", [0, 1, 5, 7, 16, 33])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
def test_replica_slices_are_disjoint_and_cover_the_batch(batch_size: int, replicas: int) -> None:
    rows = [list(range(batch_size))[replica_slice(batch_size, replicas, r)] for r in range(replicas)]
    flat = [i for part in rows for i in part]
    assert flat == list(range(batch_size))  # in order, each row exactly once
    sizes = [len(part) for part in rows]
    assert max(sizes) - min(sizes) <= 1
