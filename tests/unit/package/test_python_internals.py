"""The CPython adapter (stratagem/_python_internals.py) against the running interpreter."""

from __future__ import annotations

import subprocess
import sys
import threading

from stratagem import _python_internals as internals


def test_running_python_is_one_the_adapter_was_written_for() -> None:
    assert sys.version_info[:2] in internals.WRITTEN_FOR, (
        f"Python {sys.version_info[:2]} runs, stratagem/_python_internals.py was checked on {internals.WRITTEN_FOR}")
    assert callable(getattr(threading, "_register_atexit", None))


def test_hook_runs_before_thread_pools_stop() -> None:
    # A pool that still takes work when the hook runs, which plain atexit is too late for.
    # The module alone (runpy), not the package: importing stratagem would import torch in the child.
    script = (
        "import concurrent.futures, runpy\n"
        f"run_before_thread_shutdown = runpy.run_path({internals.__file__!r})['run_before_thread_shutdown']\n"
        "pool = concurrent.futures.ThreadPoolExecutor(1)\n"
        "run_before_thread_shutdown(lambda: print('pool answered', pool.submit(lambda: 42).result(), flush=True))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pool answered 42" in done.stdout


def test_interpreter_exit_runs_threading_hooks_joins_threads_then_atexit() -> None:
    # What a forked process that ends with os._exit would skip.
    script = (
        "import atexit, os, runpy, threading, time\n"
        f"adapter = runpy.run_path({internals.__file__!r})\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done', flush=True))).start()\n"
        "adapter['run_before_thread_shutdown'](lambda: print('threading hook', flush=True))\n"
        "atexit.register(lambda: print('atexit hook', flush=True))\n"
        "adapter['run_interpreter_exit']()\n"
        "os._exit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # CPython runs threading's hooks first, then joins the threads, then atexit.
    assert done.stdout.split("\n")[:3] == ["threading hook", "thread done", "atexit hook"]
