"""Model.compile/fit/evaluate/predict on one replica, against plain torch."""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import stratagem
from stratagem.callbacks import Callback, ProgbarLogger
from stratagem.errors import ConfigurationError
from stratagem.models.data_adapter import make_adapter


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def _data(n: int = 50, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    return x, x[:, :3].argmax(axis=1).astype(np.int64)


class StepsPerEpoch(Callback):
    """Counts the steps each epoch ran."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[int] = []

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.steps.append(0)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.steps[-1] += 1


def _compiled(optimizer: object = "sgd", metrics: list | None = None) -> stratagem.Model:
    model = stratagem.Model(_net())
    model.compile(optimizer=optimizer, loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=metrics if metrics is not None else ["accuracy"])
    return model


def test_fit_matches_plain_torch_loop_exactly() -> None:
    x, y = _data()
    model = _compiled()
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    net = _net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(2):
        for i in range(0, len(x), 8):
            optimizer.zero_grad()
            F.cross_entropy(net(torch.from_numpy(x[i:i + 8])), torch.from_numpy(y[i:i + 8])).backward()
            optimizer.step()
    for (name, a), b in zip(model.module.state_dict().items(), net.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)


def test_history_has_keras_keys_per_epoch() -> None:
    x, y = _data()
    history = _compiled().fit(x, y, batch_size=10, epochs=3, validation_data=_data(20, seed=1), verbose=0)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(len(v) == 3 for v in history.history.values())
    assert history.epoch == [0, 1, 2]


def test_evaluate_counts_each_example_once_with_short_last_batch() -> None:
    x, y = _data(10)
    model = _compiled()
    result = model.evaluate(x, y, batch_size=4, return_dict=True)  # batches of 4, 4, 2
    with torch.no_grad():
        logits = model.module(torch.from_numpy(x))
    assert result["loss"] == pytest.approx(float(F.cross_entropy(logits, torch.from_numpy(y))), rel=1e-6)
    expected_accuracy = float((logits.argmax(1) == torch.from_numpy(y)).float().mean())
    assert result["accuracy"] == pytest.approx(expected_accuracy)


def test_predict_returns_numpy_in_input_order() -> None:
    x, _ = _data(23)
    model = _compiled()
    out = model.predict(x, batch_size=5)
    assert isinstance(out, np.ndarray) and out.shape == (23, 3)
    np.testing.assert_allclose(out, model.module(torch.from_numpy(x)).detach().numpy(), rtol=1e-6)


def test_iterable_of_batches_trains_like_arrays() -> None:
    x, y = _data(40)
    batches = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 40, 8)]
    from_arrays, from_batches = _compiled(), _compiled()
    from_arrays.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    from_batches.fit(batches, verbose=0)
    for a, b in zip(from_arrays.get_weights(), from_batches.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_sample_weight_weights_the_logged_loss() -> None:
    x, y = _data(8)
    weights = np.array([1, 1, 1, 1, 0, 0, 0, 0], dtype=np.float32)
    model = _compiled(optimizer=stratagem.optimizers.SGD(learning_rate=0.0))
    history = model.fit(x, y, sample_weight=weights, batch_size=8, shuffle=False, verbose=0)
    with torch.no_grad():
        weighted_sum = float(F.cross_entropy(model.module(torch.from_numpy(x[:4])), torch.from_numpy(y[:4]), reduction="sum"))
    # Keras 3 logs sum(w * loss) / N, the value it trains on (N = 8 examples), not / sum(w).
    assert history.history["loss"][0] == pytest.approx(weighted_sum / 8, rel=1e-6)


def test_fit_before_compile_raises() -> None:
    with pytest.raises(RuntimeError, match=r"compile\(\) before fit"):
        stratagem.Model(_net()).fit(*_data(), verbose=0)


def test_global_batch_not_divisible_by_replicas_raises_with_fix() -> None:
    class FourReplicas:
        num_replicas_in_sync, replica_id_in_sync_group = 4, 0

    with pytest.raises(ConfigurationError, match=r"Received: global_batch_size=10, num_replicas_in_sync=4. Use a multiple of 4"):
        make_adapter(*_data(), None, batch_size=10, shuffle=False, seed=0, strategy=FourReplicas())  # type: ignore[arg-type]


def test_mismatched_x_and_y_lengths_raise() -> None:
    x, y = _data(10)
    with pytest.raises(ValueError, match=r"same number of examples.*Received: lengths=\[10, 9\]"):
        _compiled().fit(x, y[:9], verbose=0)


def test_y_with_iterable_x_raises() -> None:
    x, y = _data(8)
    with pytest.raises(ValueError, match="y must be None"):
        _compiled().fit([(x, y)], y, verbose=0)


def test_reiterable_input_running_out_with_steps_per_epoch_starts_a_new_pass_next_epoch() -> None:
    x, y = _data(16)
    batches = [(x[i:i + 4], y[i:i + 4]) for i in range(0, 16, 4)]  # 4 batches, iterable again
    count = StepsPerEpoch()
    with pytest.warns(UserWarning, match="ran out of data"):
        history = _compiled().fit(batches, epochs=5, steps_per_epoch=3, callbacks=[count], verbose=0)
    assert len(history.epoch) == 5 and count.steps == [3, 1, 3, 1, 3]  # Keras 3's EpochIterator


def test_steps_per_epoch_with_arrays_continues_across_epochs() -> None:
    x, y = _data(12)
    seen: list[int] = []

    class Count(Callback):
        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            seen.append(batch)

    # 3 batches a pass: the second epoch's pass runs out after 1 step and ends that epoch; the third
    # starts a new pass. Keras 3 (3.15, torch backend) gives the same [0, 1, 0, 0, 1].
    with pytest.warns(UserWarning, match="ran out of data"):
        _compiled().fit(x, y, batch_size=4, epochs=3, steps_per_epoch=2, callbacks=[Count()], verbose=0)
    assert seen == [0, 1, 0, 0, 1]


def test_callbacks_get_hooks_in_keras_order_with_logs() -> None:
    events: list[str] = []

    class Recorder(Callback):
        def on_train_begin(self, logs=None): events.append("train_begin")
        def on_epoch_begin(self, epoch, logs=None): events.append(f"epoch_begin {epoch}")
        def on_train_batch_end(self, batch, logs=None): events.append(f"batch_end {batch} {sorted(logs)}")
        def on_epoch_end(self, epoch, logs=None): events.append(f"epoch_end {epoch} {sorted(logs)}")
        def on_train_end(self, logs=None): events.append("train_end")

    x, y = _data(8)
    _compiled().fit(x, y, batch_size=4, epochs=1, callbacks=[Recorder()], verbose=0)
    assert events == ["train_begin", "epoch_begin 0", "batch_end 0 ['accuracy', 'loss']",
                      "batch_end 1 ['accuracy', 'loss']", "epoch_end 0 ['accuracy', 'loss']", "train_end"]


def test_callback_can_read_and_set_learning_rate_and_stop_training() -> None:
    class Halve(Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.optimizer.learning_rate = self.model.optimizer.lr / 2
            if epoch == 1:
                self.model.stop_training = True

    model = _compiled(optimizer=stratagem.optimizers.SGD(learning_rate=0.4))
    history = model.fit(*_data(8), batch_size=4, epochs=10, callbacks=[Halve()], verbose=0)
    assert len(history.epoch) == 2
    assert model.optimizer.learning_rate == pytest.approx(0.1)
    assert model.optimizer.torch_optimizer.param_groups[0]["lr"] == pytest.approx(0.1)


def test_progress_bar_shows_epochs_metrics_and_throughput() -> None:
    stream = io.StringIO()
    model = _compiled()
    model.fit(*_data(16), batch_size=8, epochs=2, callbacks=[ProgbarLogger(verbose=2, stream=stream)], verbose=0)
    text = stream.getvalue()
    assert "Epoch 1/2" in text and "Epoch 2/2" in text
    assert "2/2 [==============================]" in text
    assert "loss: " in text and "accuracy: " in text and "samples/s" in text


def test_logits_given_to_probability_loss_warns() -> None:
    model = stratagem.Model(_net())
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(*_data(8), batch_size=8, verbose=0)
    assert any("from_logits=True" in str(w.message) for w in caught)


def test_progress_bar_reads_metrics_at_its_cadence_not_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _compiled()
    reads: list[bool] = []
    results = model.get_metrics_result
    monkeypatch.setattr(model, "get_metrics_result", lambda local=False: reads.append(local) or results(local))
    with contextlib.redirect_stdout(io.StringIO()):  # not a terminal: a line every 10 s at most
        model.fit(*_data(80), batch_size=8, epochs=1, verbose=1)
    # 10 steps; the bar drew no line mid-epoch, so only the epoch's logs were read.
    assert reads == [False]


def test_batch_logs_a_callback_keeps_hold_that_steps_values() -> None:
    class Keep(Callback):
        kept: list = []
        seen: list = []

        def on_train_batch_end(self, batch, logs=None):
            self.kept.append(logs)
            self.seen.append(None if batch % 2 else dict(logs))  # read at once on even steps

    _compiled().fit(*_data(32), batch_size=4, epochs=1, callbacks=[Keep()], verbose=0)
    later = [dict(logs) for logs in Keep.kept]  # read after the fit
    assert [k for k, s in zip(later, Keep.seen) if s is not None] == [s for s in Keep.seen if s is not None]
    assert len({logs["loss"] for logs in later}) == 8, "each kept step must hold its own running loss"


def _repeated(x: np.ndarray, y: np.ndarray) -> stratagem.data.Dataset:
    return stratagem.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()


@pytest.mark.timeout(30)  # before the fix the epoch never ended
def test_repeated_dataset_without_steps_per_epoch_raises_at_once() -> None:
    x, y = _data(16)
    with pytest.raises(ValueError, match=r"steps_per_epoch=N.*Received: steps_per_epoch=None"):
        _compiled().fit(_repeated(x, y), epochs=1, verbose=0)


@pytest.mark.timeout(30)
def test_repeated_validation_dataset_without_validation_steps_raises_before_training() -> None:
    x, y = _data(16)
    model = _compiled()
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ValueError, match=r"validation_steps=N.*Received: validation_steps=None"):
        model.fit(x, y, batch_size=4, validation_data=_repeated(x, y), verbose=0)
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)  # raised before the first step
    with pytest.raises(ValueError, match="Received: steps=None"):
        model.evaluate(_repeated(x, y), verbose=0)


@pytest.mark.timeout(60)
def test_repeated_dataset_with_steps_trains_and_validates_those_steps() -> None:
    x, y = _data(16)
    history = _compiled().fit(_repeated(x, y), epochs=2, steps_per_epoch=3, validation_data=_repeated(x, y),
                              validation_steps=2, verbose=0)
    assert history.epoch == [0, 1] and "val_loss" in history.history


def test_model_outside_scope_of_a_multi_replica_strategy_refuses_to_fit() -> None:
    from stratagem.distribute import context

    class _TwoReplicaStrategy:  # stands for a MirroredStrategy made in this process
        num_replicas_in_sync = 2

    model = _compiled()  # built and compiled outside any scope: the default strategy
    made = _TwoReplicaStrategy()
    context.note_distributed(made)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"outside strategy.scope\(\).*Received:"):
        model.fit(*_data(8), batch_size=4, verbose=0)


def test_validation_split_validates_on_the_last_fraction_before_shuffling() -> None:
    x, y = _data(10)
    batches: list[int] = []

    class Rows(Callback):
        def on_train_batch_begin(self, batch, logs=None):
            batches.append(batch)

    model = _compiled(optimizer=stratagem.optimizers.SGD(learning_rate=0.0), metrics=[])  # weights stay put
    history = model.fit(x, y, batch_size=3, epochs=1, validation_split=0.25, callbacks=[Rows()], verbose=0)
    # Keras: split_at = floor(10 * (1 - 0.25)) = 7: rows 0-6 train (3 batches), rows 7-9 validate.
    assert batches == [0, 1, 2]
    with torch.no_grad():
        expected = F.cross_entropy(model.module(torch.from_numpy(x[7:])), torch.from_numpy(y[7:]))
    assert history.history["val_loss"][0] == pytest.approx(float(expected), rel=1e-6)


def test_validation_split_refuses_input_that_is_not_arrays_and_yields_to_validation_data() -> None:
    x, y = _data(8)
    with pytest.raises(ValueError, match=r"`validation_split` is only supported for tensors or NumPy arrays"):
        _compiled().fit([(x, y)], validation_split=0.5, verbose=0)
    with pytest.raises(ValueError, match=r"not sufficient to split.*Received: num_samples=8"):
        _compiled().fit(x, y, validation_split=0.9, verbose=0)  # floor(8 * 0.1) = 0 rows to train on
    model = _compiled(optimizer=stratagem.optimizers.SGD(learning_rate=0.0), metrics=[])
    vx, vy = _data(6, seed=1)
    history = model.fit(x, y, batch_size=4, validation_split=0.5, validation_data=(vx, vy), verbose=0)
    with torch.no_grad():  # validation_data wins (Keras 3): the validation loss is over its 6 rows
        expected = F.cross_entropy(model.module(torch.from_numpy(vx)), torch.from_numpy(vy))
    assert history.history["val_loss"][0] == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize("as_dataset", [False, True])
def test_class_weight_weights_each_example_by_its_class_like_a_weighted_torch_loop(as_dataset: bool) -> None:
    x, y = _data(12)
    class_weight = {0: 0.5, 1: 2.0}  # class 2 is absent: weight 1.0, as in Keras
    model = _compiled(optimizer=stratagem.optimizers.SGD(learning_rate=0.1))
    if as_dataset:  # Keras 3 weights a dataset's (x, y) batches too
        model.fit(stratagem.data.Dataset.from_tensor_slices((x, y)).batch(4), class_weight=class_weight, verbose=0)
    else:
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, class_weight=class_weight, verbose=0)
    net = _net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    weights = torch.tensor([class_weight.get(int(c), 1.0) for c in y])
    for i in range(0, 12, 4):
        optimizer.zero_grad()
        per_example = F.cross_entropy(net(torch.from_numpy(x[i:i + 4])), torch.from_numpy(y[i:i + 4]), reduction="none")
        (weights[i:i + 4] * per_example).sum().div(4).backward()  # Keras: sum(w * loss) / batch size
        optimizer.step()
    for (name, a), b in zip(model.module.state_dict().items(), net.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)


def test_class_weight_with_sample_weight_raises_as_keras_3() -> None:
    x, y = _data(8)
    with pytest.raises(ValueError, match=r"You cannot `class_weight` and `sample_weight` at the same time"):
        _compiled().fit(x, y, class_weight={0: 1.0}, sample_weight=np.ones(8, np.float32), verbose=0)


@pytest.mark.timeout(30)
def test_repeated_distributed_dataset_without_steps_per_epoch_raises_at_once() -> None:
    x, y = _data(16)
    model = _compiled()
    distributed = model.distribute_strategy.experimental_distribute_dataset(_repeated(x, y))
    with pytest.raises(ValueError, match=r"steps_per_epoch=N.*Received: steps_per_epoch=None"):
        model.fit(distributed, epochs=1, verbose=0)
