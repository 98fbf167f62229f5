"""``ChooseFromDatasetsDataset``: each element from the input a choice dataset names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from stratagem.data.dataset import Dataset
from stratagem.data.iterator import IterContext
from stratagem.data.ops._mixing import MixIterator, check_datasets


class ChooseFromDatasetsDataset(Dataset):
    """See ``Dataset.choose_from_datasets``.

    Element ``k`` comes from ``datasets[c_k]``, ``c_k`` the ``k``-th int64 choice. It ends with the choices, or when a
    chosen input ends if ``stop_on_empty_dataset`` (default); otherwise such choices are skipped.

    Raises:
        TypeError: If the arguments are not Datasets, or (while iterating) a choice is not an int64 scalar.
        ValueError: (While iterating) if a choice is not a valid index into ``datasets``.

    Example:
        >>> a, b = Dataset.from_tensors(np.int64(0)).repeat(), Dataset.from_tensors(np.int64(1)).repeat()
        >>> [int(x) for x in Dataset.choose_from_datasets([a, b], Dataset.range(2).repeat(2))]
        [0, 1, 0, 1]
    """

    def __init__(self, datasets: Sequence[Dataset], choice_dataset: Dataset, stop_on_empty_dataset: bool = True) -> None:
        datasets = check_datasets("choose_from_datasets", datasets)
        if not isinstance(choice_dataset, Dataset):
            raise TypeError("choose_from_datasets' choice_dataset must be a Dataset of int64 scalars. "
                            f"Received: choice_dataset of type {type(choice_dataset).__name__}")
        super().__init__(*datasets, choice_dataset)
        self._stop_on_empty = bool(stop_on_empty_dataset)

    def choice(self, value: Any) -> int:
        """``value`` as an index into the inputs, checked."""
        dtype = value.dtype if isinstance(value, (np.ndarray, np.generic, torch.Tensor)) else None
        if dtype not in (np.int64, torch.int64) or np.ndim(value) != 0:
            raise TypeError("choose_from_datasets' choice_dataset must yield int64 scalars, as in tf.data. Map the "
                            "choices to int64 first (`.map(lambda c: np.int64(c))`). Received: choice "
                            f"{value!r} of dtype {dtype}")
        num = len(self._parents) - 1
        if not 0 <= int(value) < num:
            raise ValueError(f"choose_from_datasets' choice is not an index into datasets. Received: choice={int(value)}, "
                             f"len(datasets)={num}")
        return int(value)

    def _streaming_iterator(self, ctx: IterContext) -> _ChooseIterator:
        return _ChooseIterator(self, ctx)

    def __str__(self) -> str:
        return (f"ChooseFromDatasetsDataset(stop_on_empty_dataset={self._stop_on_empty})("
                + ", ".join(map(str, self._parents)) + ")")


class _ChooseIterator(MixIterator):
    _CHOICE = "choice"

    def __init__(self, dataset: ChooseFromDatasetsDataset, ctx: IterContext) -> None:
        super().__init__("choose_from_datasets", dataset._parents[:-1], ctx, dataset._stop_on_empty)
        self._dataset = dataset
        self._choices = dataset._parents[-1]._make_iterator(ctx)

    def _pick(self) -> int:
        return self._dataset.choice(next(self._choices))

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), self._CHOICE: self._choices.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._choices.set_state(state[self._CHOICE])

    def close(self) -> None:
        super().close()
        self._choices.close()
