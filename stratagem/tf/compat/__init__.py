"""``tf.compat``: ``v1`` (TF 1 names: the TF 2 ones, plus refusals of graph mode) and ``v2`` (``stratagem.tf``)."""

from __future__ import annotations

from stratagem.tf._refusal import module_getattr

__getattr__ = module_getattr("tf.compat", {"v1": "stratagem.tf.compat.v1", "v2": "stratagem.tf"})


def __dir__() -> list[str]:
    return ["v1", "v2"]
