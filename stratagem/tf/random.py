"""``tf.random``: random tensors from torch's generators, with TF's arguments and dtypes.

``set_seed`` is ``stratagem.data.set_seed``: torch's global generator stands for TF's global seed; like TF's, it seeds
neither numpy, Python's ``random`` nor Keras's initializers (``keras.utils.set_random_seed`` does). An op-level ``seed``
gives the op its own generator: the same sequence on every run, each call its next values, as TF's op seeds do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from stratagem.data.seed import set_seed
from stratagem.tf import dtypes
from stratagem.tf._array_ops import _dims
from stratagem.tf._refusal import module_getattr
from stratagem.tf._tensor import tensor

# NOTE: one generator per op-level seed, so two calls with seed=1 continue one sequence as TF's seeded ops do.
_SEEDED: dict[int, torch.Generator] = {}


def _generator(seed: int | None) -> torch.Generator | None:
    if seed is None:
        return None
    if seed not in _SEEDED:
        _SEEDED[seed] = torch.Generator().manual_seed(int(seed))
    return _SEEDED[seed]


def uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = dtypes.float32, seed: int | None = None,
            name: str | None = None) -> torch.Tensor:
    """``tf.random.uniform``: floats in ``[minval, maxval)`` (maxval 1 by default); integers need ``maxval``."""
    target = dtypes.as_dtype(dtype)
    generator = _generator(seed)
    if target.is_integer:
        if maxval is None:
            raise ValueError(f"Must specify maxval for integer dtype {target!r}, as TF requires. Received: maxval=None")
        return torch.randint(int(minval), int(maxval), _dims(shape), generator=generator,
                             dtype=target.as_torch_dtype)
    low, high = float(minval), 1.0 if maxval is None else float(maxval)
    sample = torch.rand(_dims(shape), generator=generator, dtype=target.as_torch_dtype)
    return sample * (high - low) + low


def normal(shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = dtypes.float32, seed: int | None = None,
           name: str | None = None) -> torch.Tensor:
    sample = torch.randn(_dims(shape), generator=_generator(seed), dtype=dtypes.torch_dtype(dtype))
    return sample * float(stddev) + float(mean)


def truncated_normal(shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = dtypes.float32,
                     seed: int | None = None, name: str | None = None) -> torch.Tensor:
    """``tf.random.truncated_normal``: normal values, those beyond two standard deviations redrawn."""
    sample = torch.empty(_dims(shape), dtype=dtypes.torch_dtype(dtype))
    torch.nn.init.trunc_normal_(sample, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=_generator(seed))
    return sample * float(stddev) + float(mean)


def shuffle(value: Any, seed: int | None = None, name: str | None = None) -> torch.Tensor:
    """``tf.random.shuffle``: the rows of ``value`` in a random order."""
    data = tensor(value)
    return data[torch.randperm(len(data), generator=_generator(seed))]


def categorical(logits: Any, num_samples: int, dtype: Any = dtypes.int64, seed: int | None = None,
                name: str | None = None) -> torch.Tensor:
    """``tf.random.categorical``: ``num_samples`` class indices per row, drawn from ``softmax(logits)``."""
    probabilities = torch.softmax(tensor(logits).double(), dim=-1)
    draws = torch.multinomial(probabilities, int(num_samples), replacement=True, generator=_generator(seed))
    return draws.to(dtypes.torch_dtype(dtype))


__getattr__ = module_getattr("tf.random")
__all__ = ["categorical", "normal", "set_seed", "shuffle", "truncated_normal", "uniform"]
