"""LambdaCallback calls exactly the functions it is given, at the matching hooks."""

from __future__ import annotations

import pytest

from stratagem.callbacks import CallbackList, LambdaCallback
from tests.unit.callbacks._fakes import BATCH_SIZE, compiled_model, data


def test_given_hooks_are_called_with_keras_arguments() -> None:
    events: list[tuple] = []
    callback = LambdaCallback(
        on_train_begin=lambda logs: events.append(("train_begin",)),
        on_epoch_begin=lambda epoch, logs: events.append(("epoch_begin", epoch)),
        on_train_batch_end=lambda batch, logs: events.append(("batch_end", batch, sorted(logs))),
        on_epoch_end=lambda epoch, logs: events.append(("epoch_end", epoch, sorted(logs))),
        on_train_end=lambda logs: events.append(("train_end",)),
    )
    x, y = data(16)
    compiled_model().fit(x, y, batch_size=BATCH_SIZE, epochs=2, verbose=0, callbacks=[callback])
    keys = ["accuracy", "loss"]
    assert events == [
        ("train_begin",),
        ("epoch_begin", 0), ("batch_end", 0, keys), ("batch_end", 1, keys), ("epoch_end", 0, keys),
        ("epoch_begin", 1), ("batch_end", 0, keys), ("batch_end", 1, keys), ("epoch_end", 1, keys),
        ("train_end",),
    ]


def test_only_given_hooks_count_as_overridden() -> None:
    callbacks = CallbackList([LambdaCallback(on_epoch_end=lambda epoch, logs: None)], model=None, params={})
    assert callbacks.wants("on_epoch_end")
    # An unused batch hook must stay skipped: wanting it would cost an all-reduce of the logs every step.
    assert not callbacks.wants("on_train_batch_end")
    assert not callbacks.wants("on_epoch_begin")


def test_other_hooks_and_keras_batch_aliases_by_keyword() -> None:
    seen: list[str] = []
    callback = LambdaCallback(on_batch_end=lambda batch, logs: seen.append("batch"),
                              on_test_end=lambda logs: seen.append("test_end"))
    x, y = data(8)
    model = compiled_model()
    model.fit(x, y, batch_size=BATCH_SIZE, epochs=1, verbose=0, callbacks=[callback])
    model.evaluate(x, y, batch_size=BATCH_SIZE, callbacks=[callback])
    assert seen == ["batch", "test_end"]


def test_unknown_hook_raises_type_error_listing_hooks() -> None:
    with pytest.raises(TypeError, match="Expected one of .*on_epoch_end.*Received: on_epoch_finish"):
        LambdaCallback(on_epoch_finish=lambda epoch, logs: None)
