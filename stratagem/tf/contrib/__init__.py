"""``tf.contrib`` (TF 1, removed in TF 2.0): the names the seeds use, at their TF 2 homes; every other name refuses."""

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
