"""``Callback.stops_training`` is a ``StopsTraining`` value: a misspelt one raises instead of disabling the stop agreement."""

from __future__ import annotations

import numpy as np
import pytest
from torch import nn

import stratagem
from stratagem.callbacks import Callback, StopsTraining


def test_misspelt_stops_training_in_a_subclass_raises_value_error_naming_the_class() -> None:
    with pytest.raises(ValueError, match=r"Misspelt\.stops_training must be one of .*Received: stops_training='bacth'"):
        class Misspelt(Callback):  # noqa: F841
            stops_training = "bacth"


def test_string_values_become_members_and_compare_equal_to_their_strings() -> None:
    class PerBatch(Callback):
        stops_training = "batch"

    assert PerBatch.stops_training is StopsTraining.BATCH and PerBatch.stops_training == "batch"
    assert Callback.stops_training is StopsTraining.EPOCH


def test_misspelt_value_set_on_an_instance_raises_when_fit_starts() -> None:
    model = stratagem.Model(nn.Linear(2, 1))
    model.compile(optimizer="sgd", loss="mse")
    callback = Callback()
    callback.stops_training = "epochs"
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)
    with pytest.raises(ValueError, match="Callback.stops_training must be one of"):
        model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[callback])
