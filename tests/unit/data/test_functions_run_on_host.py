"""Dataset functions run on the host, as tf.data's: Keras ops in a map or filter make CPU tensors even where Keras's
device is a GPU (Keras's default whenever one is present). "meta" stands in for the GPU on a CPU-only machine."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

from stratagem.data import AUTOTUNE, Dataset
from stratagem.data import _structure
from stratagem.models import keras_internals


def _keras_made(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return keras.ops.cast(x, "float32") + 1.0, keras.ops.one_hot(y, 3)


@pytest.mark.parametrize("parallel", [None, AUTOTUNE])
def test_map_and_filter_functions_make_cpu_tensors_under_an_accelerator_device(monkeypatch: pytest.MonkeyPatch,
                                                                              parallel: int | None) -> None:
    monkeypatch.setattr(_structure, "_keras_leaves_host", True)  # as on a machine whose Keras default is a GPU
    ds = Dataset.from_tensor_slices((np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6) % 3))
    with keras.device("meta"):
        assert keras.ops.ones(2).device.type == "meta"  # outside the pipeline, Keras's device holds
        batches = list(ds.map(_keras_made, num_parallel_calls=parallel)
                       .filter(lambda x, y: keras.ops.sum(y) > 0).batch(3))
    assert [b[0].device.type for b in batches] == ["cpu", "cpu"]
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]),
                                  np.arange(12, dtype=np.float32).reshape(6, 2) + 1.0)


def test_keras_leaves_host_reads_kerass_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from keras.src.backend.torch import core

    monkeypatch.setattr(core, "DEFAULT_DEVICE", "cuda")
    assert keras_internals.keras_leaves_host()
    monkeypatch.setattr(core, "DEFAULT_DEVICE", "cpu")
    assert not keras_internals.keras_leaves_host()
    with keras.device("meta"):
        assert keras_internals.host_device() is not None
    assert keras_internals.host_device() is None
