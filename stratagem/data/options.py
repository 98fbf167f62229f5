"""``Options``, ``AutoShardPolicy`` and ``AUTOTUNE``: the knobs of a pipeline, tf.data's names.

As in tf.data, options travel with a pipeline: ``with_options`` merges them
into what the input carries, nodes with several inputs (``zip``,
``concatenate``, ...) merge those of every input, and ``Dataset.options()``
returns a read-only copy (mutating it raises, as in TF 2.21, instead of
silently changing every pipeline that shares the object).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import warnings
from dataclasses import dataclass, field
from typing import Any

AUTOTUNE = -1
"""Pass as ``num_parallel_calls`` or ``buffer_size`` to let the pipeline choose."""

INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


class AutoShardPolicy(str, enum.Enum):
    """How ``experimental_distribute_dataset`` splits a pipeline across workers.

    - ``AUTO``: ``FILE`` if the pipeline reads files (``list_files``,
      ``TextLineDataset``, ``TFRecordDataset``), else ``DATA``.
    - ``FILE``: each worker reads its own subset of the files.
    - ``DATA``: each worker takes its share of every global batch.
    - ``OFF``: no sharding; every worker sees the whole dataset.
    """

    AUTO = "auto"
    FILE = "file"
    DATA = "data"
    OFF = "off"


class _OptionsBase:
    """Remembers which options were set (merging takes only those) and can be made read-only."""

    _set: set[str]  # set in __post_init__, through object.__setattr__

    def __post_init__(self) -> None:
        # Constructor arguments count as set when they differ from the default, as if assigned.
        object.__setattr__(self, "_set", {f.name for f in dataclasses.fields(self)  # type: ignore[arg-type]
                                          if not isinstance(getattr(self, f.name), _OptionsBase)
                                          and getattr(self, f.name) != _default_of(f)})
        object.__setattr__(self, "_mutable", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_mutable", True):
            raise ValueError(
                "The Options returned by Dataset.options() are a read-only copy, as in TF 2.21: assigning to "
                "them would change no pipeline (or, shared, every pipeline). Build new options and attach them: `options = stratagem.data.Options(); options.experimental_distribute.auto_shard_policy "
                "= AutoShardPolicy.OFF; dataset = dataset.with_options(options)`. "
                f"Received: {type(self).__name__}.{name}={value!r}"
            )
        object.__setattr__(self, name, value)
        if "_set" in self.__dict__:
            self._set.add(name)

    def merge(self, options: Any) -> Any:
        """A copy of these options with every option that ``options`` set taken from it (TF's ``merge``).

        An option both set differently warns and takes ``options``' value.
        """
        merged = copy.deepcopy(self)
        merged._merge_from(options)
        return merged

    def _merge_from(self, other: Any) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, _OptionsBase):
                mine._merge_from(theirs)
            elif f.name in other._set:
                if f.name in self._set and mine != theirs:
                    warnings.warn(f"Changing the value of option {f.name} from {mine!r} to {theirs!r} "
                                  "while merging the options of a pipeline's inputs.", stacklevel=4)
                setattr(self, f.name, theirs)

    def read_only(self) -> Any:
        """A copy whose attributes (nested options included) cannot be assigned."""
        frozen = copy.deepcopy(self)
        frozen._freeze()
        return frozen

    def _freeze(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, _OptionsBase):
                value._freeze()
        object.__setattr__(self, "_mutable", False)


def _default_of(f: Any) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


@dataclass
class DistributeOptions(_OptionsBase):
    """``options.experimental_distribute``: the auto-shard policy."""

    auto_shard_policy: AutoShardPolicy | str = AutoShardPolicy.AUTO


@dataclass
class AutotuneOptions(_OptionsBase):
    """``options.autotune``: the memory AUTOTUNE may use for buffered elements."""

    enabled: bool = True
    ram_budget: int = 512 * 2**20


@dataclass
class OptimizationOptions(_OptionsBase):
    """``options.experimental_optimization``: tf.data's graph-rewrite switches, taken and not acted on.

    TF's rewrites (fusions, parallel batch, injected prefetch) change speed,
    never elements or their order; stratagem's ops have no graph to rewrite,
    so a switch that is set warns once that it has no effect here.

    One switch acts: ``map_vectorization`` (a stratagem extension named after
    the switch TF 2.0-2.5 had). Unset (None), a per-element ``map`` followed
    by ``batch`` (or a filling ``cache``) runs once per batch under
    ``torch.func.vmap`` where that gives the same elements by construction
    (``stratagem/data/_per_row.py``). ``False`` keeps every map per element.
    ``True`` adds, for functions vmap cannot run (numpy code), a sampled check
    of a plain batch call: every row of the first batch, then the first and
    last rows of each later batch. That check is not complete: a function
    that gives other results on a batch only for some middle rows of a later
    batch goes unnoticed, which is why it is opt-in (``stratagem/data/ops/map.py``).
    It applies to the whole pipeline it is attached to, wherever
    ``with_options`` is called.
    """

    apply_default_optimizations: bool | None = None
    filter_fusion: bool | None = None
    filter_parallelization: bool | None = None
    inject_prefetch: bool | None = None
    map_and_batch_fusion: bool | None = None
    map_and_filter_fusion: bool | None = None
    map_fusion: bool | None = None
    map_parallelization: bool | None = None
    noop_elimination: bool | None = None
    parallel_batch: bool | None = None
    seq_interleave_prefetch: bool | None = None
    shuffle_and_repeat_fusion: bool | None = None
    map_vectorization: bool | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_") and value is not None and name != "map_vectorization":
            warn_once(f"optimization.{name}", f"options.experimental_optimization.{name} has no effect here: tf.data's "
                      "graph rewrites change speed only, and stratagem's pipeline ops are not a graph to rewrite.")


# NOTE: process-wide, so a setting repeated in a loop (pipelines are often rebuilt) warns once; Python's own dedup is
# per code location and is turned off by test runners and `-W always`.
_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Warns ``message`` (a setting that has no effect here) the first time ``key`` is seen in this process."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


@dataclass
class Options(_OptionsBase):
    """Pipeline options, set through ``dataset.with_options(options)`` as in tf.data.

    Example:
        >>> options = Options()
        >>> options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    """

    deterministic: bool = True
    experimental_distribute: DistributeOptions = field(default_factory=DistributeOptions)
    autotune: AutotuneOptions = field(default_factory=AutotuneOptions)
    experimental_optimization: OptimizationOptions = field(default_factory=OptimizationOptions)
