"""Keras callback objects run in stratagem's fit loop with Keras's semantics; Keras's own fit refuses under replicas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stratagem  # before keras: sets KERAS_BACKEND=torch
import stratagem.tf as tf
import keras  # noqa: I001
from stratagem.distribute import context
from stratagem.errors import ConfigurationError
from tests.dist._keras_models import images


def _model() -> tf.keras.Model:
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((28, 28, 1)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class _Recorder(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.calls.append(("train_begin", dict(self.params), self.model))

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:  # Keras 2's alias of on_train_batch_end
        self.calls.append(("batch_end", batch, sorted(logs)))

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.calls.append(("epoch_end", epoch, dict(logs)))
        if epoch == 1:
            self.model.stop_training = True


def test_keras_callback_subclass_sees_keras_semantics_and_stops_training() -> None:
    x, y = images(48)
    model, recorder = _model(), _Recorder()
    history = model.fit(x, y, batch_size=16, epochs=5, verbose=0, callbacks=[recorder])
    begin, *rest = recorder.calls
    assert begin[0] == "train_begin" and begin[2] is model  # the model fit was called on, not a wrapper
    assert begin[1]["epochs"] == 5 and begin[1]["steps"] == 3 and begin[1]["verbose"] == 0
    assert [c[:2] for c in rest if c[0] == "batch_end"] == [("batch_end", b) for _ in range(2) for b in range(3)]
    assert all(c[2] == ["accuracy", "loss"] for c in rest if c[0] == "batch_end")
    epochs = [c for c in rest if c[0] == "epoch_end"]
    assert [c[1] for c in epochs] == [0, 1] and len(history.history["loss"]) == 2  # stopped after epoch 1
    assert epochs[-1][2]["loss"] == pytest.approx(history.history["loss"][-1])


def test_keras_model_checkpoint_and_early_stopping_work_with_the_wrapper_and_the_facade(tmp_path: Path) -> None:
    x, y = images(32)
    for name, model in (("facade", _model()), ("wrapper", stratagem.Model(keras.Sequential(
            [keras.Input((28, 28, 1)), keras.layers.Flatten(), keras.layers.Dense(10)])))):
        if name == "wrapper":  # the crash: AttributeError set_fit_state
            model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        callbacks = [keras.callbacks.ModelCheckpoint(str(tmp_path / name / "e{epoch}.keras")),
                     keras.callbacks.ModelCheckpoint(str(tmp_path / name / "w{epoch}.weights.h5"),
                                                     save_weights_only=True),
                     keras.callbacks.EarlyStopping(monitor="loss", min_delta=100.0, patience=1)]
        history = model.fit(x, y, batch_size=16, epochs=6, verbose=0, callbacks=callbacks)
        assert len(history.history["loss"]) == 2, name  # EarlyStopping: no improvement of 100 after epoch 1
        saved = sorted(p.name for p in (tmp_path / name).iterdir())
        assert saved == ["e1.keras", "e2.keras", "w1.weights.h5", "w2.weights.h5"], (name, saved)
        loaded = keras.saving.load_model(tmp_path / name / "e2.keras", compile=False)
        np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=0, atol=1e-6)


def test_keras_backup_and_restore_is_refused_with_stratagems() -> None:
    with pytest.raises(ValueError, match="stratagem.callbacks.BackupAndRestore"):
        _model().fit(*images(16), verbose=0, callbacks=[keras.callbacks.BackupAndRestore("/tmp/unused-backup")])


class _TwoReplicas:
    num_replicas_in_sync = 2


def test_keras_own_fit_refuses_while_a_strategy_has_several_replicas() -> None:
    from stratagem.models.keras_internals import guard_keras_loops

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((8, 4), np.float32), np.ones((8, 1), np.float32)
    guard_keras_loops()
    model.fit(x, y, verbose=0)  # one replica in this process: Keras's own loop is right, and runs
    # A stand-in for a 2-replica strategy (a real one needs two processes: tests/dist/test_tf_keras_equivalence.py).
    stand_in = _TwoReplicas()
    context.note_distributed(stand_in)  # type: ignore[arg-type]
    for call in (lambda: model.fit(x, y, verbose=0), lambda: model.evaluate(x, y, verbose=0)):
        with pytest.raises(ConfigurationError, match=r"each replica alone.*Received: num_replicas_in_sync=2"):
            call()


def test_metric_reset_states_is_tf_keras_2s_name_for_reset_state() -> None:
    import stratagem.tf as tf

    mean = tf.keras.metrics.Mean()
    mean.update_state([4.0, 6.0])
    assert float(mean.result()) == 5.0
    mean.reset_states()
    mean.update_state([1.0])
    assert float(mean.result()) == 1.0
