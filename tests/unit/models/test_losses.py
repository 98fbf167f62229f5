"""Unit tests of ``stratagem.losses``: Keras names, one value per example, values.

Every expected value is computed independently of the module under test: by
hand, with numpy, or with ``torch.nn.functional``; where Keras documents a
behaviour (probability normalisation, clipping at epsilon=1e-7, averaging over
the last axis), the test follows Keras.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from stratagem import losses

KERAS_EPSILON = 1e-7
KERAS_NAMES = [
    ("sparse_categorical_crossentropy", losses.SparseCategoricalCrossentropy),
    ("categorical_crossentropy", losses.CategoricalCrossentropy),
    ("binary_crossentropy", losses.BinaryCrossentropy),
    ("mean_squared_error", losses.MeanSquaredError),
    ("mse", losses.MeanSquaredError),
    ("mean_absolute_error", losses.MeanAbsoluteError),
    ("mae", losses.MeanAbsoluteError),
]


def _logits(batch_size: int, num_classes: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch_size, num_classes, generator=torch.Generator().manual_seed(seed)) * 3.0


# ---- names ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "loss_class"), KERAS_NAMES)
def test_keras_name_resolves_to_its_loss_class(name, loss_class):
    assert type(losses.get(name)) is loss_class


def test_upper_case_name_resolves_like_lower_case():
    assert type(losses.get("MSE")) is losses.MeanSquaredError
    assert type(losses.get("Sparse_Categorical_Crossentropy")) is losses.SparseCategoricalCrossentropy


def test_keras_name_gives_from_logits_false_like_keras():
    # keras.losses.get("sparse_categorical_crossentropy") expects probabilities.
    assert losses.get("sparse_categorical_crossentropy").from_logits is False


def test_loss_instance_is_returned_unchanged():
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    assert losses.get(loss) is loss


def test_unknown_name_raises_value_error_listing_valid_names():
    with pytest.raises(ValueError, match=r"Unknown loss.*Received: loss='hinge_typo'") as info:
        losses.get("hinge_typo")
    for name, _ in KERAS_NAMES:
        assert repr(name) in str(info.value)


def test_non_callable_identifier_raises_type_error():
    with pytest.raises(TypeError, match="Received: loss of type int"):
        losses.get(3)


# ---- one value per example ------------------------------------------------------

PER_EXAMPLE_CASES = [
    pytest.param(losses.SparseCategoricalCrossentropy(from_logits=True), torch.tensor([0, 2, 1, 2, 0]),
                 _logits(5, 3), id="sparse_ce"),
    pytest.param(losses.SparseCategoricalCrossentropy(from_logits=True), torch.tensor([[0], [2], [1], [2], [0]]),
                 _logits(5, 3), id="sparse_ce_column_labels"),
    pytest.param(losses.CategoricalCrossentropy(from_logits=True), F.one_hot(torch.tensor([0, 2, 1, 2, 0]), 3).float(),
                 _logits(5, 3), id="categorical_ce"),
    pytest.param(losses.BinaryCrossentropy(from_logits=True), torch.tensor([[1.0], [0.0], [1.0], [1.0], [0.0]]),
                 _logits(5, 1), id="binary_ce_column"),
    pytest.param(losses.BinaryCrossentropy(from_logits=True), torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0]),
                 _logits(5, 1), id="binary_ce_flat_labels"),
    pytest.param(losses.MeanSquaredError(), torch.ones(5, 4), _logits(5, 4), id="mse_2d"),
    pytest.param(losses.MeanSquaredError(), torch.ones(5), _logits(5, 1), id="mse_flat_labels"),
    pytest.param(losses.MeanAbsoluteError(), torch.ones(5, 2, 3), _logits(5, 6).reshape(5, 2, 3), id="mae_3d"),
]


@pytest.mark.parametrize(("loss", "y_true", "y_pred"), PER_EXAMPLE_CASES)
def test_loss_returns_one_value_per_example(loss, y_true, y_pred):
    assert loss(y_true, y_pred).shape == (5,)


# ---- sparse categorical cross-entropy -------------------------------------------


def test_sparse_ce_from_logits_equals_torch_cross_entropy():
    logits, labels = _logits(6, 4), torch.tensor([3, 0, 1, 1, 2, 0])
    expected = F.cross_entropy(logits, labels, reduction="none")
    torch.testing.assert_close(losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits), expected)


def test_sparse_ce_column_labels_equal_flat_labels():
    logits, labels = _logits(6, 4), torch.tensor([3, 0, 1, 1, 2, 0])
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    torch.testing.assert_close(loss(labels.reshape(6, 1), logits), loss(labels, logits), rtol=0, atol=0)


def test_sparse_ce_on_probabilities_equals_negative_log_of_true_class():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.25, 0.5, 0.25]])
    labels = torch.tensor([0, 2, 1])
    expected = -np.log(np.array([0.7, 0.8, 0.5]))
    got = losses.SparseCategoricalCrossentropy()(labels, probs)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_sparse_ce_zero_probability_is_clipped_at_keras_epsilon():
    probs, labels = torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.tensor([1])
    got = losses.SparseCategoricalCrossentropy()(labels, probs)
    np.testing.assert_allclose(got.numpy(), [-np.log(KERAS_EPSILON)], rtol=1e-9)


def test_sparse_ce_on_unnormalised_probabilities_normalises_like_keras():
    probs = torch.tensor([[0.2, 0.2, 0.1], [0.3, 0.3, 0.6]])  # rows sum to 0.5 and 1.2
    labels = torch.tensor([0, 2])
    expected = -np.log(np.array([0.2 / 0.5, 0.6 / 1.2]))
    got = losses.SparseCategoricalCrossentropy()(labels, probs)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_sparse_ce_on_sequence_logits_uses_last_axis_as_classes():
    logits = _logits(2 * 5, 3).reshape(2, 5, 3)  # (batch, timesteps, classes)
    labels = torch.tensor([[0, 1, 2, 0, 1], [2, 2, 1, 0, 0]])
    per_step = F.cross_entropy(logits.reshape(-1, 3), labels.reshape(-1), reduction="none").reshape(2, 5)
    got = losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    torch.testing.assert_close(got, per_step.mean(dim=1))


def test_sparse_ce_on_logits_without_from_logits_warns_once():
    loss, logits, labels = losses.SparseCategoricalCrossentropy(), _logits(4, 3), torch.tensor([0, 1, 2, 0])
    with pytest.warns(UserWarning, match=r"SparseCategoricalCrossentropy\(from_logits=True\)") as record:
        loss(labels, logits)
        loss(labels, logits)
    assert len([w for w in record if "from_logits=True" in str(w.message)]) == 1


def test_sparse_ce_on_probabilities_does_not_warn():
    probs = torch.softmax(_logits(4, 3), dim=-1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        losses.SparseCategoricalCrossentropy()(torch.tensor([0, 1, 2, 0]), probs)
    assert not [w for w in record if "from_logits" in str(w.message)]


# ---- categorical cross-entropy --------------------------------------------------


def test_categorical_ce_from_logits_equals_torch_cross_entropy_with_one_hot_targets():
    logits, labels = _logits(6, 4), torch.tensor([3, 0, 1, 1, 2, 0])
    one_hot = F.one_hot(labels, 4).float()
    expected = F.cross_entropy(logits, labels, reduction="none")
    torch.testing.assert_close(losses.CategoricalCrossentropy(from_logits=True)(one_hot, logits), expected)


def test_categorical_ce_from_logits_with_soft_targets_equals_torch():
    logits = _logits(3, 4)
    soft = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0]])
    expected = F.cross_entropy(logits, soft, reduction="none")
    torch.testing.assert_close(losses.CategoricalCrossentropy(from_logits=True)(soft, logits), expected)


def test_categorical_ce_on_probabilities_normalises_then_takes_log_like_keras():
    probs = np.array([[0.2, 0.2, 0.1], [0.1, 0.1, 0.8]])  # first row sums to 0.5
    one_hot = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    expected = -(one_hot * np.log(probs / probs.sum(axis=-1, keepdims=True))).sum(axis=-1)
    got = losses.CategoricalCrossentropy()(torch.tensor(one_hot), torch.tensor(probs))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9)


def test_categorical_ce_on_logits_without_from_logits_warns():
    with pytest.warns(UserWarning, match=r"CategoricalCrossentropy\(from_logits=True\).*Received: min=") as record:
        losses.CategoricalCrossentropy()(F.one_hot(torch.tensor([0, 1]), 3).float(), _logits(2, 3))
    assert len(record) == 1


# ---- binary cross-entropy -------------------------------------------------------


def _numpy_log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def test_binary_ce_from_logits_equals_numpy_formula():
    logits = _logits(5, 1).double()
    labels = np.array([[1.0], [0.0], [1.0], [0.0], [1.0]])
    x = logits.numpy()
    expected = -(labels * _numpy_log_sigmoid(x) + (1 - labels) * _numpy_log_sigmoid(-x))[:, 0]
    got = losses.BinaryCrossentropy(from_logits=True)(torch.tensor(labels), logits)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9)


def test_binary_ce_on_probabilities_averages_over_last_axis():
    probs = np.array([[0.9, 0.2, 0.6], [0.3, 0.5, 0.99]])
    labels = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    expected = -(labels * np.log(probs) + (1 - labels) * np.log(1 - probs)).mean(axis=-1)
    got = losses.BinaryCrossentropy()(torch.tensor(labels), torch.tensor(probs))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9)


def test_binary_ce_probability_of_zero_is_clipped_at_keras_epsilon():
    got = losses.BinaryCrossentropy()(torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([[0.0]], dtype=torch.float64))
    np.testing.assert_allclose(got.numpy(), [-np.log(KERAS_EPSILON)], rtol=1e-9)


def test_binary_ce_on_logits_without_from_logits_warns():
    with pytest.warns(UserWarning, match=r"BinaryCrossentropy\(from_logits=True\)") as record:
        losses.BinaryCrossentropy()(torch.tensor([[1.0], [0.0]]), torch.tensor([[2.5], [-1.0]]))
    assert len(record) == 1


# ---- regression losses ----------------------------------------------------------


def test_mse_on_2d_targets_averages_over_last_axis():
    y_true = np.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]])
    y_pred = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.5]])
    expected = np.array([(1 + 0 + 4) / 3, (9 + 1 + 0) / 3])
    got = losses.get("mse")(torch.tensor(y_true), torch.tensor(y_pred))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_mae_on_2d_targets_averages_over_last_axis():
    y_true = np.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]])
    y_pred = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.5]])
    expected = np.array([(1 + 0 + 2) / 3, (3 + 1 + 0) / 3])
    got = losses.get("mae")(torch.tensor(y_true), torch.tensor(y_pred))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_mse_flat_targets_for_column_predictions_are_not_broadcast():
    # (batch,) targets against (batch, 1) predictions must pair row i with row i,
    # not broadcast to (batch, batch).
    got = losses.MeanSquaredError()(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[1.0], [0.0], [6.0]]))
    torch.testing.assert_close(got, torch.tensor([0.0, 4.0, 9.0]))


def test_empty_replica_share_returns_empty_per_example_losses():
    got = losses.BinaryCrossentropy(from_logits=True)(torch.zeros(0, 1), torch.zeros(0, 1))
    assert got.shape == (0,)


# ---- plain functions ------------------------------------------------------------


def test_plain_function_loss_returns_its_values_under_its_name():
    def squared_hinge(y_true, y_pred):
        return torch.clamp(1 - y_true * y_pred, min=0) ** 2

    loss = losses.get(squared_hinge)
    assert isinstance(loss, losses.Loss)
    assert loss.name == "squared_hinge"
    got = loss(torch.tensor([1.0, -1.0, 1.0]), torch.tensor([0.5, 0.5, 2.0]))
    torch.testing.assert_close(got, torch.tensor([0.25, 2.25, 0.0]))


def test_plain_function_loss_with_feature_axis_is_averaged_per_example():
    loss = losses.get(lambda y_true, y_pred: (y_pred - y_true).abs())
    got = loss(torch.zeros(2, 2), torch.tensor([[1.0, 3.0], [-2.0, 0.0]]))
    torch.testing.assert_close(got, torch.tensor([2.0, 1.0]))
