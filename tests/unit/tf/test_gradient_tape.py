"""tf.GradientTape on torch autograd: TF's semantics for gradient, watch, persistent, stop_recording, jacobian."""

from __future__ import annotations

import pytest
import torch

import stratagem.tf as tf
import keras  # after stratagem: the torch backend


def test_gradient_of_watched_tensor_is_the_derivative() -> None:
    x = torch.tensor([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = (x ** 3).sum()
    torch.testing.assert_close(tape.gradient(y, x), 3 * x.detach() ** 2)


def test_unwatched_constant_gets_none_and_zero_on_request() -> None:
    x, c = torch.tensor(2.0), torch.tensor(5.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * c
    assert tape.gradient(y, c) is None  # TF does not watch constants
    assert float(tape.gradient(y, c, unconnected_gradients="zero")) == 0.0
    assert float(tape.gradient(y, x)) == 5.0


def test_sources_keep_their_nested_structure_and_keras_variables_stand_for_their_value() -> None:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    x = torch.ones(4, 3)
    with tf.GradientTape() as tape:
        loss = model(x).sum()
    kernel, bias = model.trainable_variables
    grads = tape.gradient(loss, {"w": [kernel], "b": (bias,)})
    assert set(grads) == {"w", "b"} and isinstance(grads["w"], list) and isinstance(grads["b"], tuple)
    torch.testing.assert_close(grads["w"][0], torch.full((3, 2), 4.0))  # d(sum(xW+b))/dW = sum of x rows
    torch.testing.assert_close(grads["b"][0], torch.full((2,), 4.0))


def test_non_persistent_tape_refuses_a_second_gradient_and_persistent_allows_it() -> None:
    x = torch.tensor(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match="persistent=True"):
        tape.gradient(y, x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y, z = x * x, x * x * x
    assert (float(tape.gradient(y, x)), float(tape.gradient(z, x))) == (6.0, 27.0)


def test_watch_accessed_variables_false_gives_gradients_only_for_watched() -> None:
    a = keras.Variable(2.0)
    b = keras.Variable(3.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(a)
        y = a.value * b.value
    grad_a, grad_b = tape.gradient(y, [a, b])
    assert float(grad_a) == 3.0 and grad_b is None
    assert tape.watched_variables() == (a.value,)


def test_stop_recording_blocks_the_gradient_through_that_part() -> None:
    x = torch.tensor(2.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
        with tape.stop_recording():
            z = x * 10.0
        total = y + z
    assert float(tape.gradient(total, x)) == 4.0  # only y's 2x; z was not recorded


def test_list_target_differentiates_the_sum_and_output_gradients_weight_it() -> None:
    x = torch.tensor([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y1, y2 = x * 2.0, x * x
    torch.testing.assert_close(tape.gradient([y1, y2], x), 2.0 + 2 * x.detach())
    torch.testing.assert_close(tape.gradient(y2, x, output_gradients=torch.tensor([10.0, 0.0])),
                               torch.tensor([20.0, 0.0]))


def test_tape_records_inside_no_grad_as_tf_tapes_do() -> None:
    x = torch.tensor(4.0)
    with torch.no_grad():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x * x
    assert float(tape.gradient(y, x)) == 8.0


def test_jacobian_has_target_then_source_shape() -> None:
    x = torch.tensor([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x[:2] * x[1:]  # y0 = x0 x1, y1 = x1 x2
    jacobian = tape.jacobian(y, x)
    torch.testing.assert_close(jacobian, torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 2.0]]))


def test_watching_an_integer_tensor_raises_with_the_fix() -> None:
    with tf.GradientTape() as tape, pytest.raises(ValueError, match="tf.cast"):
        tape.watch(torch.tensor([1, 2]))


def test_frozen_keras_weight_gets_no_gradient() -> None:
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.layers[0].trainable = False
    with tf.GradientTape() as tape:
        loss = model(torch.ones(1, 2)).sum()
    assert tape.gradient(loss, model.layers[0].kernel) is None
