"""A default fit makes one collective per step (the gradient all-reduce), and a bounded few per epoch.

Counted in real gloo workers by wrapping torch.distributed's Python collectives
after compile: DDP's gradient buckets reach gloo through stratagem's comm hook
(an asynchronous ``all_reduce``), and every other collective stratagem makes
(metric, stop and RNG reductions, seeds, gathers) goes through the same API.
"""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
import torch
import torch.distributed as dist

import stratagem
from stratagem.callbacks import BackupAndRestore, Callback
from stratagem.testing import run_workers
from tests.dist._models import classification_data, small_cnn

pytestmark = pytest.mark.dist

_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce", "barrier", "gather",
                "scatter", "reduce_scatter", "all_gather_object", "broadcast_object_list")


class _Counter:
    def __init__(self) -> None:
        self.gradient = 0
        self.other: list[str] = []

    def install(self) -> None:
        for name in _COLLECTIVES:
            original = getattr(dist, name)

            def counted(*args, _name=name, _original=original, **kwargs):  # type: ignore[no-untyped-def]
                if _name == "all_reduce" and kwargs.get("async_op"):
                    self.gradient += 1  # DDP's bucket reduction, through stratagem's comm hook
                else:
                    self.other.append(_name)
                return _original(*args, **kwargs)

            setattr(dist, name, counted)


class _EpochWindows(Callback):
    """Notes the counts at each epoch's start and at the end of training (it never stops training)."""

    stops_training = "never"

    def __init__(self, counter: _Counter) -> None:
        super().__init__()
        self.counter, self.marks = counter, []

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.marks.append((self.counter.gradient, len(self.counter.other)))

    def on_train_end(self, logs: dict | None = None) -> None:
        self.marks.append((self.counter.gradient, len(self.counter.other)))


def _worker_count(rank: int, world_size: int, epochs: int, steps_per_epoch: int) -> dict:
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    with strategy.scope():
        model = stratagem.Model(small_cnn())
        model.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    counter = _Counter()
    counter.install()
    windows = _EpochWindows(counter)
    x, y = classification_data(16 * epochs * steps_per_epoch)
    with tempfile.TemporaryDirectory() as backup:
        # verbose left at its default: the progress bar is on, as users run it.
        model.fit(x, y, batch_size=16, epochs=epochs, steps_per_epoch=steps_per_epoch,
                  callbacks=[windows, BackupAndRestore(backup, save_freq="epoch")])
    return {"gradient": counter.gradient, "other": counter.other, "marks": windows.marks}


def test_ten_step_fit_with_progress_bar_and_backup_makes_one_collective_per_step() -> None:
    epochs, steps = 2, 5
    results = run_workers(_worker_count, world_size=2, args=(epochs, steps), timeout_s=100)
    for rank, result in enumerate(results):
        assert result["gradient"] == epochs * steps, (rank, result)
        marks = result["marks"]
        per_epoch = [marks[i + 1][1] - marks[i][1] for i in range(epochs)]
        grads_per_epoch = [marks[i + 1][0] - marks[i][0] for i in range(epochs)]
        assert grads_per_epoch == [steps] * epochs, (rank, marks)
        # The epoch's metric all-reduce and the backup's RNG gather; no per-step log or stop reduction. Each
        # reduce on the CPU compares the ranks' shapes first (one small all_gather: gloo aborts on a mismatch).
        assert all(n <= 2 * 2 for n in per_epoch), (rank, per_epoch, result["other"])
        # Before the first epoch nothing (the shuffle seed was agreed at compile); after it, the final backup.
        assert marks[0] == (0, 0), (rank, marks)
        assert len(result["other"]) - marks[-1][1] <= 1 * 2, (rank, result["other"])


def test_counter_sees_collectives_so_the_bound_is_not_vacuous() -> None:
    # The same fit with a callback that asks for global batch logs must add one all-reduce per step.
    results = run_workers(_worker_global_logs, world_size=2, timeout_s=100)
    assert all(len(r["other"]) >= 5 for r in results), results


class _WantsGlobalLogs(Callback):
    requires_global_batch_logs = True
    stops_training = "never"

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        assert logs is not None and "loss" in logs


def _worker_global_logs(rank: int, world_size: int) -> dict:
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    with strategy.scope():
        model = stratagem.Model(small_cnn())
        model.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    counter = _Counter()
    counter.install()
    x, y = classification_data(80)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[_WantsGlobalLogs()])
    torch.manual_seed(0)
    return {"gradient": counter.gradient, "other": counter.other}


def _worker_mixed_float16(rank: int, world_size: int) -> dict:
    from stratagem import mixed_precision

    strategy = stratagem.distribute.MirroredStrategy(num_replicas=world_size)
    mixed_precision.set_global_policy("mixed_float16")
    try:
        with strategy.scope():
            model = stratagem.Model(small_cnn())
            model.compile(optimizer="sgd", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True))
    finally:
        mixed_precision.set_global_policy("float32")
    counter = _Counter()
    counter.install()
    windows = _EpochWindows(counter)
    x, y = classification_data(80)
    x[72, 0] = float("inf")  # the last step's rows 8-15 are replica 1's: only its gradients overflow
    before = [w.copy() for w in model.get_weights()]
    first = model.fit(x[:64], y[:64], batch_size=16, epochs=1, shuffle=False, callbacks=[windows])  # progress bar on
    trained = [w.copy() for w in model.get_weights()]
    history = model.fit(x[64:], y[64:], batch_size=16, epochs=1, verbose=0, shuffle=False)
    return {"gradient": counter.gradient, "other": counter.other, "marks": windows.marks,
            "moved": any(not np.array_equal(a, b) for a, b in zip(before, trained)),
            "skipped_unchanged": all(np.array_equal(a, b) for a, b in zip(trained, model.get_weights())),
            "skipped": history.history["skipped_steps"][-1] - first.history["skipped_steps"][-1]}


def test_mixed_float16_under_ddp_adds_no_per_step_collective_and_every_replica_skips_an_overflow() -> None:
    results = run_workers(_worker_mixed_float16, world_size=2, timeout_s=100)
    for rank, result in enumerate(results):
        marks = result["marks"]
        assert marks[1][0] - marks[0][0] == 4, (rank, marks)  # four steps, one gradient all-reduce each
        # Only the epoch's metric all-reduce (and its shape check): no found_inf agreement per step (DDP's sums
        # are the same everywhere).
        assert marks[1][1] - marks[0][1] <= 1 * 2, (rank, result["other"])
        assert result["moved"], rank
        # Replica 1's inf reached both replicas through DDP's sum: both skipped that update, with no agreement.
        assert result["skipped_unchanged"] and result["skipped"] == 1.0, (rank, result)
