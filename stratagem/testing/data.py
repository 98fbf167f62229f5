"""``assert_checkpoint_roundtrip``: save an iterator's state at every step, restore, compare the rest."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from stratagem.data._structure import to_numpy
from stratagem.data.dataset import Dataset
from stratagem.data.iterator import check_json_state


def assert_checkpoint_roundtrip(dataset: Dataset, *, seed: int = 0, max_elements: int = 200) -> list[Any]:
    """Checks that restoring the state taken after k elements yields exactly elements k, k+1, ...

    For every k, the state goes through JSON and is restored into a fresh
    iterator built with a *different* seed and epoch (the state must carry
    everything), and taking the state must not disturb the iterator it was
    taken from. Returns the reference elements (as numpy).

    Raises:
        AssertionError: Naming the step and the first element that differs.
    """
    reference = _take_all(dataset.iterator(seed=seed, epoch=0), max_elements)
    for k in range(len(reference) + 1):
        iterator = dataset.iterator(seed=seed, epoch=0)
        for _ in range(k):
            next(iterator)
        state = iterator.get_state()
        check_json_state(state)
        restored = dataset.iterator(seed=seed + 7919, epoch=13)
        restored.set_state(json.loads(json.dumps(state)))
        _assert_same(_take_all(restored, max_elements), reference[k:], f"restored after {k} elements")
        _assert_same(_take_all(iterator, max_elements), reference[k:], f"continued after get_state at {k}")
        iterator.close()
        restored.close()
    return reference


def _take_all(iterator: Any, limit: int) -> list[Any]:
    out = []
    for element in iterator:
        out.append(to_numpy(element))
        if len(out) > limit:
            raise AssertionError(f"dataset yields more than max_elements={limit}; test a finite, smaller one")
    return out


def _assert_same(actual: list[Any], expected: list[Any], where: str) -> None:
    if len(actual) != len(expected):
        raise AssertionError(f"{where}: got {len(actual)} elements, expected {len(expected)}")
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not _equal(a, e):
            raise AssertionError(f"{where}: element {i} differs: {a!r} != {e!r}")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
