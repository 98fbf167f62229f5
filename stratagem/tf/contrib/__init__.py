"""``tf.contrib`` (TF 1): the names the seeds use, at their TF 2 homes; every other name refuses.

``tf.contrib`` was removed in TF 2.0; ``contrib.distribute.MirroredStrategy``, ``contrib.data.map_and_batch`` /
``shuffle_and_repeat`` and ``contrib.lookup.index_table_from_tensor`` resolve to what replaced them.
"""

from __future__ import annotations

import importlib
from typing import Any

from stratagem.tf._refusal import missing_name

_SUBMODULES = {
    "distribute": "stratagem.tf.contrib.distribute",
    "data": "stratagem.tf.contrib.data",
    "lookup": "stratagem.tf.contrib.lookup",
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    if name == "MirroredStrategy":  # the seeds' prose spells it tf.contrib.MirroredStrategy
        return importlib.import_module(_SUBMODULES["distribute"]).MirroredStrategy
    raise missing_name("tf.contrib", name)


def __dir__() -> list[str]:
    return sorted([*_SUBMODULES, "MirroredStrategy"])
