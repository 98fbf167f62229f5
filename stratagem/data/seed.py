"""``set_seed``: makes the pipelines' unseeded random ops reproducible (``tf.random.set_seed`` for tf.data).

An unseeded random op uses its iterator's seed, drawn once per dataset from torch's global generator (seeded from the
OS), so unseeded pipelines differ between runs, as in TF, until ``set_seed`` (or ``torch.manual_seed``).
"""

from __future__ import annotations

import numpy as np
import torch

def set_seed(seed: int) -> None:
    """Seeds the draw of every later unseeded pipeline's seed, as ``tf.random.set_seed`` does for tf.data.

    It is ``torch.manual_seed``, so weight initialisation repeats too. Two unseeded shuffles still differ, and each
    epoch reshuffles; running the program again repeats every order.

    Example:
        >>> set_seed(42)
        >>> first = list(Dataset.range(10).shuffle(10))
        >>> set_seed(42)
        >>> first == list(Dataset.range(10).shuffle(10))
        True
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int. Received: seed={seed!r}")
    torch.manual_seed(int(seed))


def default_seed() -> int:
    """The seed of an iterator made without one, drawn from torch's global generator."""
    return int(torch.randint(0, 2**32, (), dtype=torch.int64))
