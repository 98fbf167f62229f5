"""``Options``, ``AutoShardPolicy`` and ``AUTOTUNE``: the knobs of a pipeline, tf.data's names."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

AUTOTUNE = -1
"""Pass as ``num_parallel_calls`` or ``buffer_size`` to let the pipeline choose."""

INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


class AutoShardPolicy(str, enum.Enum):
    """How ``experimental_distribute_dataset`` splits a pipeline across workers.

    - ``AUTO``: ``FILE`` if the pipeline reads files (``list_files``,
      ``TextLineDataset``), else ``DATA``.
    - ``FILE``: each worker reads its own subset of the files.
    - ``DATA``: each worker takes its share of every global batch.
    - ``OFF``: no sharding; every worker sees the whole dataset.
    """

    AUTO = "auto"
    FILE = "file"
    DATA = "data"
    OFF = "off"


@dataclass
class DistributeOptions:
    """``options.experimental_distribute``: the auto-shard policy."""

    auto_shard_policy: AutoShardPolicy | str = AutoShardPolicy.AUTO


@dataclass
class AutotuneOptions:
    """``options.autotune``: the memory AUTOTUNE may use for buffered elements."""

    enabled: bool = True
    ram_budget: int = 512 * 2**20


@dataclass
class Options:
    """Pipeline options, set through ``dataset.with_options(options)`` as in tf.data.

    Example:
        >>> options = Options()
        >>> options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    """

    deterministic: bool = True
    experimental_distribute: DistributeOptions = field(default_factory=DistributeOptions)
    autotune: AutotuneOptions = field(default_factory=AutotuneOptions)
