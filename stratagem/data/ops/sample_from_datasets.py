"""``SampleFromDatasetsDataset``: each element from an input drawn at random by weight."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import IterContext
from stratagem.data.ops._mixing import MixIterator, check_datasets
from stratagem.data.ops.shuffle import mix_seed


class SampleFromDatasetsDataset(Dataset):
    """See ``Dataset.sample_from_datasets``.

    An ended input stops it if ``stop_on_empty_dataset``, else drops out, as in tf.data. Draws use ``seed`` (or the
    iterator's), repeated each epoch unless ``rerandomize_each_iteration``; proportions match tf.data, not the order.

    Raises:
        TypeError: If ``datasets`` is not a list of Datasets or ``weights`` is a Dataset.
        ValueError: If ``weights`` does not have one non-negative number per dataset, summing above 0.
    """

    def __init__(self, datasets: Sequence[Dataset], weights: Sequence[float] | None = None, seed: int | None = None,
                 stop_on_empty_dataset: bool = False, rerandomize_each_iteration: bool | None = None) -> None:
        datasets = check_datasets("sample_from_datasets", datasets)
        if isinstance(weights, Dataset):
            raise TypeError("sample_from_datasets takes fixed weights; a Dataset of weights is not supported. "
                            "Received: weights of type " + type(weights).__name__)
        w = np.full(len(datasets), 1.0) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
        if len(w) != len(datasets) or (w < 0).any() or w.sum() <= 0:
            raise ValueError("sample_from_datasets needs one non-negative weight per dataset, not all zero. "
                             f"Received: weights={weights!r}, len(datasets)={len(datasets)}")
        super().__init__(*datasets)
        self._weights, self._seed = w, seed
        self._stop_on_empty = bool(stop_on_empty_dataset)
        self._rerandomize = bool(rerandomize_each_iteration)
        self._salt = zlib.crc32(str(self).encode())  # two unseeded samplers of one pipeline draw differently

    def epoch_seed(self, ctx: IterContext) -> int:
        return mix_seed(self._seed if self._seed is not None else ctx.seed, self._salt,
                        ctx.epoch if self._rerandomize else 0)

    def _streaming_iterator(self, ctx: IterContext) -> _SampleIterator:
        return _SampleIterator(self, ctx)

    def __str__(self) -> str:
        return (f"SampleFromDatasetsDataset(weights={self._weights.tolist()}, seed={self._seed}, "
                f"stop_on_empty_dataset={self._stop_on_empty})(" + ", ".join(map(str, self._parents)) + ")")


class _SampleIterator(MixIterator):
    _DRAWS = "num_draws"

    def __init__(self, dataset: SampleFromDatasetsDataset, ctx: IterContext) -> None:
        super().__init__("sample_from_datasets", dataset._parents, ctx, dataset._stop_on_empty)
        self._dataset = dataset
        self._seed = dataset.epoch_seed(ctx)
        self._start_rng(0)

    def _start_rng(self, draws: int) -> None:
        self._rng, self._draws = np.random.default_rng(self._seed), draws
        self._rng.random(draws)  # the same stream, moved past the draws already made

    def _pick(self) -> int:
        weights = self._dataset._weights * np.asarray(self._alive)
        if weights.sum() <= 0:
            raise StopIteration
        self._draws += 1
        cumulative = np.cumsum(weights) / weights.sum()
        return min(int(np.searchsorted(cumulative, self._rng.random(), side="right")), len(weights) - 1)

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), self._SEED: self._seed, self._DRAWS: self._draws}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._seed = int(state[self._SEED])
        self._start_rng(int(state[self._DRAWS]))
