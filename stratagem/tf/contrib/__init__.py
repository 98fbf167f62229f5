"""``tf.contrib`` (TF 1): the names the seeds use, at their TF 2 homes; every other name refuses.

``tf.contrib`` was removed in TF 2.0; ``contrib.distribute.MirroredStrategy``, ``contrib.data.map_and_batch`` /
``shuffle_and_repeat`` and ``contrib.lookup.index_table_from_tensor`` resolve to what replaced them.
"""

from __future__ import annotations

from stratagem.tf._refusal import module_getattr

_NAMES: dict[str, str | tuple[str, str]] = {
    "distribute": "stratagem.tf.contrib.distribute",
    "data": "stratagem.tf.contrib.data",
    "lookup": "stratagem.tf.contrib.lookup",
    # the seeds' prose spells it tf.contrib.MirroredStrategy
    "MirroredStrategy": ("stratagem.tf.contrib.distribute", "MirroredStrategy"),
}
__getattr__ = module_getattr("tf.contrib", _NAMES)


def __dir__() -> list[str]:
    return sorted(_NAMES)
