"""fit's input checks, as tf.keras makes them: empty input, batch_size=0, steps_per_epoch beyond the data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import stratagem

from stratagem.callbacks import Callback
from stratagem.data import Dataset
from tests.unit.models.test_model_fit import StepsPerEpoch, _compiled, _data


@pytest.mark.parametrize("kind", ["arrays", "dataset", "generator", "dataset_with_steps"])
def test_empty_input_raises_expected_non_empty(kind: str) -> None:
    x, y = _data(8)
    x, y = x[:0], y[:0]
    model = _compiled()
    with pytest.raises(ValueError, match="Expected input data to be non-empty"):
        if kind == "arrays":
            model.fit(x, y, batch_size=4, verbose=0)
        elif kind == "dataset":
            model.fit(Dataset.from_tensor_slices((x, y)).batch(4), verbose=0)
        elif kind == "generator":
            model.fit((batch for batch in []), verbose=0)
        else:
            model.fit(Dataset.from_tensor_slices((x, y)).batch(4), steps_per_epoch=3, verbose=0)


def test_empty_arrays_with_steps_per_epoch_raise_expected_non_empty() -> None:
    x, y = _data(8)
    with pytest.raises(ValueError, match="Expected input data to be non-empty"):
        _compiled().fit(x[:0], y[:0], batch_size=4, steps_per_epoch=2, verbose=0)


@pytest.mark.parametrize("batch_size", [0, -4])
def test_non_positive_batch_size_raises(batch_size: object) -> None:
    x, y = _data(8)
    with pytest.raises(ValueError, match=f"Received: batch_size={batch_size}"):
        _compiled().fit(x, y, batch_size=batch_size, verbose=0)


def test_steps_per_epoch_beyond_array_data_ends_each_epoch_early_with_keras_3_warning() -> None:
    # Keras 3 (checked with keras 3.15, torch backend): 3 batches a pass and steps_per_epoch=5 give
    # epochs of 3 steps, each ending with the warning; training goes on (tf.keras 2 stopped).
    x, y = _data(12)
    seen: list[int] = []

    class Count(Callback):
        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            seen.append(batch)

    with pytest.warns(UserWarning, match="Your input ran out of data; interrupting training") as caught:
        history = _compiled().fit(x, y, batch_size=4, epochs=2, steps_per_epoch=5, callbacks=[Count()], verbose=0)
    assert seen == [0, 1, 2, 0, 1, 2] and history.epoch == [0, 1]
    assert sum("ran out of data" in str(w.message) for w in caught) == 2
    assert np.isfinite(history.history["loss"]).all()


def test_spent_generator_with_steps_per_epoch_runs_every_epoch_as_keras_3() -> None:
    # Keras 3.15 (torch backend, and TF 2.21's tf.keras): running out never stops fit. Each epoch that
    # finds the input spent warns and ends; History holds every epoch (a loss only where steps ran).
    x, y = _data(12)
    batches = ((x[i:i + 4], y[i:i + 4]) for i in range(0, 12, 4))  # one pass only: it cannot start another
    model, count = _compiled(), StepsPerEpoch()
    with pytest.warns(UserWarning, match="Your input ran out of data; interrupting training") as caught:
        history = model.fit(batches, epochs=5, steps_per_epoch=2, callbacks=[count], verbose=0)
    assert history.epoch == [0, 1, 2, 3, 4] and count.steps == [2, 1, 0, 0, 0]
    assert sum("ran out of data" in str(w.message) for w in caught) == 4  # epochs 1 to 4
    assert len(history.history["loss"]) == 2 and model.stop_training is False


@pytest.mark.parametrize("dtype", [np.uint8, np.int64])
def test_integer_inputs_are_cast_to_the_model_float_dtype_as_tf_keras(dtype: type) -> None:
    x, y = _data(16)
    x_int = np.round(np.abs(x) * 10).astype(dtype)
    reference, model = _compiled(), _compiled()
    history = model.fit(x_int, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    reference.fit(x_int.astype(np.float32), y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    for a, b in zip(model.module.parameters(), reference.module.parameters()):
        assert torch.equal(a, b)
    assert model.evaluate(x_int, y, verbose=0) == reference.evaluate(x_int.astype(np.float32), y, verbose=0)
    np.testing.assert_array_equal(model.predict(x_int, verbose=0), reference.predict(x_int.astype(np.float32), verbose=0))


def test_embedding_model_keeps_integer_indices() -> None:
    model = stratagem.Model(nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 2)))
    model.compile(optimizer="sgd", loss="mse")
    tokens = np.arange(16).reshape(8, 2) % 10
    history = model.fit(tokens, np.zeros((8, 2), np.float32), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
