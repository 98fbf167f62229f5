"""Inputs TF/Keras 3 refuse (or read another way) get Keras' behaviour or an error naming the problem and the fix.

Issue 21 item 4: each case here was accepted silently, or failed with raw torch
text, before. What Keras 3 does was checked against TF 2.21 (tf.keras): it
trains a whole pass for steps=0, refuses sample_weight beside a Dataset and an
empty BackupAndRestore folder, and ignores a class_weight key no label holds.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.data import Dataset

RNG = np.random.default_rng(3)
X = RNG.random((16, 4), dtype=np.float32)
Y = RNG.integers(0, 3, 16)


def _model(outputs: int = 3, loss: object = None) -> stratagem.Model:
    torch.manual_seed(0)
    model = stratagem.Model(nn.Sequential(nn.Linear(4, outputs)))
    model.compile(optimizer="sgd", loss=loss or stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _weights(model: stratagem.Model) -> list[np.ndarray]:
    return [w.copy() for w in model.get_weights()]


def test_steps_zero_is_one_whole_pass_as_keras() -> None:
    # Keras 3 tests `if steps_per_epoch:`, so 0 trains the whole epoch (tf.keras 2.21 does); it trained nothing.
    whole, zero = _model(), _model()
    whole_loss = whole.fit(X, Y, batch_size=4, shuffle=False, verbose=0).history["loss"]
    zero_loss = zero.fit(X, Y, batch_size=4, shuffle=False, steps_per_epoch=0, verbose=0).history["loss"]
    assert zero_loss == whole_loss
    for a, b in zip(_weights(whole), _weights(zero)):
        np.testing.assert_array_equal(a, b)
    assert zero.evaluate(X, Y, batch_size=4, steps=0, verbose=0) == whole.evaluate(X, Y, batch_size=4, verbose=0)
    assert zero.predict(X, batch_size=4, steps=0, verbose=0).shape == (16, 3)


@pytest.mark.parametrize(("call", "error", "pattern"), [
    (lambda m: m.fit(X, Y, steps_per_epoch=-1, verbose=0), ValueError, r"steps_per_epoch must be >= 0.*Received: steps_per_epoch=-1"),
    (lambda m: m.fit(X, Y, steps_per_epoch=2.5, verbose=0), TypeError, r"steps_per_epoch must be an int.*=2.5"),
    (lambda m: m.evaluate(X, Y, steps=-1, verbose=0), ValueError, r"steps must be >= 0.*Received: steps=-1"),
    (lambda m: m.evaluate(X, Y, steps="3", verbose=0), TypeError, r"steps must be an int.*Received: steps='3'"),
    (lambda m: m.predict(X, steps=1.0, verbose=0), TypeError, r"steps must be an int"),
])
def test_bad_steps_name_the_argument(call: object, error: type, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call(_model())  # type: ignore[operator]


def test_sample_weight_beside_a_dataset_is_refused_as_keras() -> None:
    dataset = Dataset.from_tensor_slices((X, Y)).batch(4)
    model = _model()
    for call in (lambda: model.fit(dataset, sample_weight=np.ones(16), verbose=0),
                 lambda: model.evaluate(dataset, sample_weight=np.ones(16), verbose=0)):
        with pytest.raises(ValueError, match=r"sample_weight must be None when x is a dataset.*\(x, y, sample_weight\)"):
            call()


def test_sample_weight_must_be_one_per_example() -> None:
    with pytest.raises(ValueError, match=re.escape("Received: sample_weight.shape=(16, 3)")):
        _model().fit(X, Y, sample_weight=np.ones((16, 3)), verbose=0)
    _model().fit(X, Y, sample_weight=np.ones((16, 1)), verbose=0)  # a trailing axis of 1 is one per example


def test_class_weight_for_a_class_no_label_holds_warns_and_has_no_effect() -> None:
    labels = np.minimum(Y, 1)  # classes 0 and 1 only
    with pytest.warns(UserWarning, match=r"class\(es\) \[7\], which no training label holds.*label classes=\[0, 1\]"):
        with_seven = _model().fit(X, labels, class_weight={0: 1.0, 1: 2.0, 7: 5.0}, shuffle=False, verbose=0)
    without = _model().fit(X, labels, class_weight={0: 1.0, 1: 2.0}, shuffle=False, verbose=0)
    assert with_seven.history["loss"] == without.history["loss"]  # Keras 3's numbers: the key is ignored


def test_fit_without_labels_names_the_missing_y() -> None:
    with pytest.raises(ValueError, match=r"the batch has no labels \(y is None\).*Received: y=None"):
        _model().fit(X, None, verbose=0)


def test_outputs_and_labels_of_different_sizes_name_both_shapes() -> None:
    model = _model(outputs=2, loss="mse")
    with pytest.raises(ValueError, match=re.escape("labels (16, 3), outputs (16, 2)")):
        model.fit(X, np.ones((16, 3), np.float32), batch_size=16, verbose=0)


@pytest.mark.parametrize("from_logits", [True, False])
@pytest.mark.parametrize(("labels", "low", "high"), [(Y + 5, 5, 7), (Y - 1, -1, 1)])
def test_sparse_labels_out_of_range_name_the_range(labels: np.ndarray, low: int, high: int, from_logits: bool) -> None:
    model = stratagem.Model(nn.Sequential(nn.Linear(4, 3), *([] if from_logits else [nn.Softmax(-1)])))
    model.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=from_logits))
    with pytest.raises(ValueError, match=rf"class ids from 0 to 2 .*labels run from {low} to {high}.*"
                                         rf"Received: label range=\[{low}, {high}\]"):
        model.fit(X, labels, batch_size=16, verbose=0)


def test_evaluate_without_labels_names_the_missing_y_as_fit_does() -> None:
    # Keras 3.15 (torch) raises here too (a raw AttributeError); it returned [] silently, as if evaluated.
    with pytest.raises(ValueError, match=r"the batch has no labels \(y is None\).*Received: y=None"):
        _model().evaluate(X, None, verbose=0)
    with pytest.raises(ValueError, match=r"the batch has no labels"):
        _model().evaluate(Dataset.from_tensor_slices(X).batch(4), verbose=0)
