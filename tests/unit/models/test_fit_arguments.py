"""Bad plain arguments to fit raise at once, naming the argument and the fix (not a raw error, not silence)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import stratagem
from stratagem.callbacks import History

X = np.random.default_rng(0).random((16, 4), dtype=np.float32)
Y = (X.sum(axis=1) > 2).astype(np.int64)

# (fit arguments over x=X, y=Y, batch_size=8, verbose=0; the error; a pattern its message must match)
CASES = [
    ({"epochs": -1}, ValueError, r"epochs must be >= 0.*Received: epochs=-1"),
    ({"epochs": 1.5}, TypeError, r"epochs must be an int.*Received: epochs=1.5"),
    ({"epochs": "2"}, TypeError, r"epochs must be an int.*Received: epochs='2'"),
    ({"initial_epoch": -1}, ValueError, r"initial_epoch must be >= 0"),
    ({"verbose": 5}, ValueError, r"verbose must be 'auto', 0.*Received: verbose=5"),
    ({"shuffle": "yes"}, TypeError, r"shuffle must be True or False.*Received: shuffle='yes'"),
    ({"callbacks": History()}, TypeError, r"a single callback goes in a list, callbacks=\[cb\]"),
    ({"callbacks": [1]}, TypeError, r"callbacks\[0\] is not a Callback.*Received: callbacks\[0\]=1"),
    ({"batch_size": 2.5}, TypeError, r"batch_size must be an int.*Received: batch_size=2.5"),
    ({"validation_data": (X,)}, ValueError, r"validation_data has no labels.*\(x_val, y_val\)"),
    ({"validation_data": X}, ValueError, r"validation_data has no labels.*of type ndarray"),
    ({"validation_data": (X, Y), "validation_freq": 0}, ValueError, r"validation_freq must be >= 1.*Received: validation_freq=0"),
    ({"validation_data": (X, Y), "validation_freq": 1.5}, TypeError, r"validation_freq must be an int"),
    ({"validation_data": (X, Y), "validation_steps": 0}, ValueError, r"validation_steps must be >= 1"),
    ({"class_weight": [1.0, 2.0]}, TypeError, r"class_weight must be a dict.*of type list"),
    ({"class_weight": {"a": 1.0}}, ValueError, r"class_weight keys are class indices.*key 'a'"),
    ({"x": None, "y": None}, ValueError, r"fit needs training data, but x is None"),
]


@pytest.fixture(scope="module")
def model() -> stratagem.Model:
    model = stratagem.Model(torch.nn.Linear(4, 2))
    model.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@pytest.mark.parametrize(("arguments", "error", "pattern"), CASES, ids=[str(list(a)) for a, _, _ in CASES])
def test_bad_fit_argument_raises_naming_it(model: stratagem.Model, arguments: dict[str, Any],
                                           error: type[Exception], pattern: str) -> None:
    weights = [p.detach().clone() for p in model.module.parameters()]
    with pytest.raises(error, match=pattern):
        model.fit(**({"x": X, "y": Y, "batch_size": 8, "verbose": 0} | arguments))
    assert all(torch.equal(a, b) for a, b in zip(weights, model.module.parameters()))  # raised before any step


def test_good_arguments_still_train(model: stratagem.Model) -> None:
    history = model.fit(X, Y, batch_size=np.int64(8), epochs=2, verbose=2, class_weight={0: 1.0, 1: 2.0},
                        validation_data=(X, Y), validation_freq=2)
    assert len(history.history["loss"]) == 2 and len(history.history["val_loss"]) == 1
