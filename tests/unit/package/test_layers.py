"""Imports point one way: each layer uses only the layers below it.

Bottom to top: base (errors, nesting, the launched-process contract) ->
cluster resolution (pure Python) -> data pipelines, losses, metrics,
optimizers (they know nothing of strategies) -> distribute (strategies,
distributed datasets) -> checkpoint -> callbacks -> models -> the launcher,
testing helpers and the package root.
"""

from __future__ import annotations

from tests.unit.package._source import modules

_LAYERS: list[tuple[str, ...]] = [
    ("stratagem.errors", "stratagem._nest", "stratagem._launched", "stratagem._process", "stratagem._version",
     "stratagem._disk_full", "stratagem._torch_internals", "stratagem._python_internals", "stratagem._lazy_imports",
     "stratagem._environ", "stratagem._keras_names"),
    ("stratagem.distribute.cluster", "stratagem.distribute._cluster_spec", "stratagem.distribute._slurm"),
    ("stratagem.data", "stratagem.datasets", "stratagem.losses", "stratagem.metrics", "stratagem.optimizers",
     "stratagem.mixed_precision"),
    ("stratagem.distribute", "stratagem.nn"),
    ("stratagem.checkpoint", "stratagem.train"),
    ("stratagem.callbacks",),
    ("stratagem.models",),
    ("stratagem.estimator",),
    ("stratagem.launcher", "stratagem.testing", "stratagem"),
]
# NOTE: the upward edges, by design: a script's MirroredStrategy(num_replicas=N) starts
# the other replicas through this one public launcher call; a strategy with several replicas
# gives Keras objects made in its scope TF's cross-replica semantics through the one Keras adapter;
# a forked map worker puts Keras on the CPU through that adapter (CUDA cannot be used after a fork), and a dataset
# function runs with Keras on the CPU through it (tf.data's functions run on the host).
_ALLOWED_UPWARD = {("stratagem.distribute.mirrored", "stratagem.launcher"),
                   ("stratagem.distribute.strategy", "stratagem.models.keras_internals"),
                   ("stratagem.data.ops.parallel_map", "stratagem.models.keras_internals"),
                   ("stratagem.data._structure", "stratagem.models.keras_internals")}


def _layer(module: str) -> int:
    best, level = -1, -1
    for index, prefixes in enumerate(_LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), index
    return level


def test_every_import_points_down_or_sideways() -> None:
    upward = []
    for module, tree in modules():
        own = _layer(module)
        assert own >= 0, f"{module} belongs to no layer: add it to _LAYERS"
        for target in _imported(tree):
            if _layer(target) > own and not any(module == a and target.startswith(b) for a, b in _ALLOWED_UPWARD):
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that point up a layer:\n" + "\n".join(sorted(set(upward)))


def test_data_knows_nothing_of_strategies() -> None:
    offenders = [f"{m} -> {t}" for m, tree in modules() if m.startswith("stratagem.data")
                 for t in _imported(tree) if t.startswith("stratagem.distribute")]
    assert not offenders, offenders


def _imported(tree: object) -> list[str]:
    from tests.unit.package._source import imported_modules

    return [name for name in imported_modules(tree) if name.startswith("stratagem")]  # type: ignore[arg-type]
