"""Parallel map: real parallelism for GIL-bound Python, ordered results, errors that stop everything."""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np

import pytest

from stratagem.data import AUTOTUNE, Dataset
from stratagem.data.ops.parallel_map import CALIBRATION_CALLS, available_cores
from stratagem.testing.data import assert_checkpoint_roundtrip


def gil_heavy(x: object) -> object:
    """About 1-2 ms of pure-Python work: holds the GIL the whole time."""
    total = 0
    for i in range(25_000):
        total += i % 7
    return x


def _stamped(x: object) -> tuple[int, float, float]:
    """Runs ``gil_heavy`` and says which process ran it, and from when to when."""
    start = time.monotonic()
    gil_heavy(x)
    return os.getpid(), start, time.monotonic()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.skipif(available_cores() < 2, reason="needs 2 cores to run anything in parallel")
def test_autotune_runs_gil_bound_python_in_several_processes_at_once(batched: bool) -> None:
    # The speed goal (>= 1.5x on 2 cores) is measured by `make bench`
    # (bench_data.py, "gil_map"); here, what makes it possible: the calls run in
    # more than one process other than this one, and their run times overlap.
    ds = Dataset.range(400).map(_stamped, num_parallel_calls=AUTOTUNE)
    ds = ds.batch(40) if batched else ds
    stamps: list[tuple[int, float, float]] = []
    for element in ds:
        pids, starts, ends = (np.atleast_1d(np.asarray(part)) for part in element)
        stamps += zip(pids.tolist(), starts.tolist(), ends.tolist())
    assert len(stamps) == 400
    by_pid: dict[int, list[tuple[float, float]]] = {}
    for pid, start, end in stamps:
        by_pid.setdefault(pid, []).append((start, end))
    # The first few calls run here, timed, to decide (AUTOTUNE's calibration).
    inline = len(by_pid.pop(os.getpid(), []))
    assert inline <= CALIBRATION_CALLS, f"{inline} calls ran in the consuming process after calibration"
    assert len(by_pid) >= 2, f"the calls ran in one worker process: {list(by_pid)}"
    first, second, *_ = sorted(by_pid, key=lambda pid: -len(by_pid[pid]))
    overlapping = any(a_start < b_end and b_start < a_end
                      for a_start, a_end in by_pid[first] for b_start, b_end in by_pid[second])
    assert overlapping, "the worker processes took turns instead of running at the same time"


@pytest.mark.parametrize("parallel", [2, AUTOTUNE])
def test_parallel_results_keep_input_order(parallel: int) -> None:
    out = [int(x) for x in Dataset.range(300).map(gil_heavy, num_parallel_calls=parallel)]
    assert out == list(range(300))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batched", [False, True])
def test_error_in_map_surfaces_with_index_and_stops_workers(batched: bool) -> None:
    def explode(x: object) -> object:
        gil_heavy(x)
        if int(x) == 57:  # type: ignore[call-overload]
            raise KeyError("element 57 is broken")
        return x

    gc.collect()  # pools of earlier tests' datasets end with their datasets
    before = set(multiprocessing.active_children())  # only this test's workers count below
    ds = Dataset.range(200).map(explode, num_parallel_calls=2)
    ds = ds.batch(10) if batched else ds
    with pytest.raises(KeyError, match="element 57 is broken") as caught:
        for _ in ds:
            pass
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "in map function" in notes and "Traceback" in notes and "explode" in notes
    def ours() -> list:
        return [p for p in multiprocessing.active_children() if p not in before]

    deadline = time.monotonic() + 10
    while ours() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not ours(), "map workers were left running"


def test_cheap_function_under_autotune_stays_in_process() -> None:
    ds = Dataset.range(50).map(lambda x: x + 1, num_parallel_calls=AUTOTUNE)
    iterator = iter(ds)
    assert [int(x) for x in iterator] == list(range(1, 51))
    assert iterator._pool is None, "a call cheaper than a trip between processes must stay inline"
    batched = ds.batch(10)
    assert sum(len(b) for b in batched) == 50
    assert ds._pool is None


@pytest.mark.parametrize("parallel", [2, AUTOTUNE])
def test_parallel_map_checkpoint_roundtrip(parallel: int) -> None:
    assert_checkpoint_roundtrip(Dataset.range(9).map(gil_heavy, num_parallel_calls=parallel))
    assert_checkpoint_roundtrip(Dataset.range(10).map(gil_heavy, num_parallel_calls=parallel).batch(3).prefetch(2))


def test_prefetch_checkpoint_roundtrip_and_autotune_values() -> None:
    ds = Dataset.range(12).shuffle(12, seed=4).prefetch(AUTOTUNE)
    assert sorted(int(x) for x in assert_checkpoint_roundtrip(ds)) == list(range(12))


def test_nondeterministic_map_still_yields_every_element_once() -> None:
    ds = Dataset.range(10).map(gil_heavy, num_parallel_calls=2, deterministic=False)
    assert sorted(int(x) for x in ds) == list(range(10))


def test_invalid_num_parallel_calls_raises() -> None:
    with pytest.raises(ValueError, match="Received: num_parallel_calls=0"):
        Dataset.range(3).map(gil_heavy, num_parallel_calls=0)


def _prefetch_threads() -> int:
    import threading

    return sum(1 for t in threading.enumerate() if t.name == "stratagem-prefetch" and t.is_alive())


def _slow(value: int, seconds: float) -> int:
    time.sleep(seconds)
    return value


def test_autotune_prefetch_stays_inline_for_a_consumer_that_does_no_work() -> None:
    before = _prefetch_threads()
    iterator = iter(Dataset.range(40).map(lambda v: _slow(v, 0.002)).prefetch(AUTOTUNE))
    seen, started = [], False
    for value in iterator:  # checked while iterating: a finished thread would no longer count
        seen.append(int(value))
        started = started or _prefetch_threads() > before
    assert seen == list(range(40)) and not started


def test_autotune_prefetch_starts_its_thread_when_the_consumer_works_between_elements() -> None:
    before = _prefetch_threads()
    iterator = iter(Dataset.range(40).map(lambda v: _slow(v, 0.0005)).prefetch(AUTOTUNE))
    seen, started = [], False
    for value in iterator:
        seen.append(int(value))
        time.sleep(0.003)  # the training step
        started = started or _prefetch_threads() > before
    assert seen == list(range(40)) and started
    iterator.close()


def _keras_device_setting(x: object) -> tuple[int, str, str]:
    """Which process ran it, and the Keras device settings there (the current-device global, the env variable)."""
    gil_heavy(x)
    from keras.src.backend.common import global_state

    return os.getpid(), str(global_state.get_global_attribute("torch_device", None)), \
        os.environ.get("KERAS_TORCH_DEVICE", "unset")


@pytest.mark.timeout(60)
@pytest.mark.skipif(available_cores() < 2, reason="AUTOTUNE starts workers only with 2 cores or more")
def test_map_workers_run_keras_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker forked after the consumer initialised CUDA cannot use CUDA; Keras must not send map_func's
    # tensors there. No GPU here: the check is the workers' Keras device setting, which the consumer leaves unset.
    monkeypatch.delenv("KERAS_TORCH_DEVICE", raising=False)
    had_growth = "TF_FORCE_GPU_ALLOW_GROWTH" in os.environ
    import stratagem  # noqa: F401  (the torch backend, before keras)
    import keras  # noqa: F401  (imported before the fork, as in a training script)

    if not had_growth:  # Keras's first import sets it; the environment is left as the test found it
        os.environ.pop("TF_FORCE_GPU_ALLOW_GROWTH", None)
    settings = list(Dataset.range(40).map(_keras_device_setting, num_parallel_calls=AUTOTUNE))
    in_workers = {(bytes(device).decode(), bytes(env).decode()) for pid, device, env in settings
                  if int(pid) != os.getpid()}
    assert in_workers == {("cpu", "cpu")}
    assert "KERAS_TORCH_DEVICE" not in os.environ  # the consumer's own setting is untouched


@pytest.mark.timeout(60)
def test_a_forked_copy_closing_the_pool_leaves_the_owners_workers_running() -> None:
    # A warm worker or a fork inside map_func inherits the pool (and its finalizer): closing it there must neither
    # join processes that are not its children nor send the owner's workers their stop signal.
    from stratagem.data.ops.parallel_map import WorkerPool

    pool = WorkerPool(Dataset.range(10).map(gil_heavy, num_parallel_calls=2), 1)
    try:
        child = os.fork()
        if child == 0:
            try:
                pool.close()
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "close() in the forked copy raised"
        pool.processes[0].join(timeout=1.0)
        assert pool.processes[0].is_alive(), "the forked copy's close() stopped the owner's worker"
    finally:
        pool.close()
    assert not pool.processes


_WORKERS_WITHOUT_KERAS = """
import os, sys
from stratagem.data import AUTOTUNE, Dataset

def seen(x):
    total = 0
    for i in range(25_000):  # long enough for AUTOTUNE to start workers
        total += i % 7
    return os.getpid(), "stratagem.models" in sys.modules, os.environ.get("KERAS_TORCH_DEVICE", "unset")

rows = list(Dataset.range(40).map(seen, num_parallel_calls=AUTOTUNE))
print(sorted({(bool(loaded), bytes(env).decode()) for pid, loaded, env in rows if int(pid) != os.getpid()}))
"""


@pytest.mark.timeout(60)
@pytest.mark.skipif(available_cores() < 2, reason="AUTOTUNE starts workers only with 2 cores or more")
def test_map_workers_of_a_consumer_without_keras_import_no_models() -> None:
    # Importing Keras's adapter (stratagem.models) took each new worker 0.2 s of CPU, in every epoch of a pipeline
    # whose consumer never imported it (the TFRecord bench: 0.91 s epochs instead of 0.79 s). Without Keras loaded,
    # the workers only set the variable a Keras imported later reads.
    env = {key: value for key, value in os.environ.items() if key != "KERAS_TORCH_DEVICE"}
    done = subprocess.run([sys.executable, "-c", _WORKERS_WITHOUT_KERAS], capture_output=True, text=True,
                          timeout=50, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[(False, 'cpu')]"
