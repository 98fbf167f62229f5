"""A script that leaves a pipeline's iterator open still exits cleanly: its threads stop before the interpreter.

Without that, a prefetch or interleave thread inside a torch op at exit aborts the process (exit status 134,
"terminate called without an active exception"): every run of the scripts below did, before the change.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from stratagem.data import _exit_threads

ROOT = Path(__file__).resolve().parents[3]

# A map whose element takes tens of milliseconds in one torch op (the GIL released), and one look at the first
# element through an iterator kept in a variable (a temporary one is closed at once): the pipeline's thread is
# computing the next elements when the script ends.
_SCRIPT = """
import torch
import stratagem.data as sd
w = torch.randn(1200, 1200)
heavy = lambda i: (w @ w).sum() + i
{dataset}
iterator = iter(dataset)
print("first", float(next(iterator)) != 0.0, flush=True)
"""
_PIPELINES = {
    "prefetch": "dataset = sd.Dataset.range(1000).map(heavy).prefetch(2)",
    "interleave": "dataset = sd.Dataset.range(4).interleave(lambda i: sd.Dataset.range(100).map(heavy), "
                  "cycle_length=2, num_parallel_calls=2)",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(_PIPELINES))
def test_script_with_an_open_pipeline_iterator_exits_cleanly(kind: str) -> None:
    script = _SCRIPT.format(dataset=_PIPELINES[kind])
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          cwd=ROOT, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "first True" in done.stdout and "terminate called" not in done.stderr


def test_stop_all_stops_every_thread_and_waits_a_bounded_time() -> None:
    ended, stuck_release = threading.Event(), threading.Event()
    stop = threading.Event()
    quick = threading.Thread(target=lambda: (stop.wait(30), ended.set()), daemon=True)
    quick.start()
    quick_owner = _exit_threads.EventThread(stop, quick)
    _exit_threads.stop_at_exit(quick_owner)
    # An owner whose thread does not end when asked (inside a long element): waited for only what is left.
    stuck = threading.Thread(target=lambda: stuck_release.wait(30), daemon=True)
    stuck.start()
    stuck_owner = _exit_threads.EventThread(threading.Event(), stuck)
    _exit_threads.stop_at_exit(stuck_owner)
    started = time.monotonic()
    _exit_threads.stop_all(wait_s=0.3)
    assert ended.is_set() and not quick.is_alive()
    assert 0.2 < time.monotonic() - started < 3.0 and stuck.is_alive()
    stuck_release.set()
    stuck.join(5)


def test_a_forked_child_leaves_its_parents_threads_alone() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=lambda: stop.wait(30), daemon=True)
    thread.start()
    owner = _exit_threads.EventThread(stop, thread)
    _exit_threads.stop_at_exit(owner)
    try:
        pid = os.fork()
        if pid == 0:  # the child: nothing of the parent's to stop (its locks may be held by a thread not copied)
            os._exit(0 if len(_exit_threads._live) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert owner in _exit_threads._live and thread.is_alive()  # the parent's own registry is untouched
    finally:
        stop.set()
        thread.join(5)
