"""Runs Horovod's own test files against ``stratagem.horovod``: one ``stratagem run -np N`` job per test.

Horovod's test files are not ours to vendor, so this takes their paths
(fetch ``test/parallel/test_torch.py``, ``test/single/test_torch_elastic.py``
and ``test/utils/common.py`` from horovod/horovod into a folder of your own).
A shim written to a temporary folder makes ``import horovod.torch as hvd``
resolve to ``stratagem.horovod``; each test then runs under pytest on every
rank of its own job (CPU, gloo), with a deadline, and each rank reports its
outcome. The shim also stands in for the few things Horovod's test helpers
import that are not Horovod's API: ``horovod.runner.util.threads.in_thread``,
``mock`` (the standard library's ``unittest.mock``), ``cloudpickle`` (refused
if called: nothing here unpickles), ``inspect.getargspec`` (removed in
Python 3.11; the test file predates that, and ``getfullargspec`` has the same
``args``) and ``hvd.sycl_built()`` (False: Intel's fork of Horovod asks it in its
XPU skips; stratagem.horovod, like Horovod, has no such function). With ``--hide-muon`` it also hides ``torch.optim.Muon`` (torch 2.13 has it),
which refuses 1-D parameters, from the tests that build every optimizer.

Usage:
    python bench/horovod_upstream.py PATH/test/parallel/test_torch.py [-k allreduce,join] [--json out.json]

The exit status is 1 if any test failed on any rank (skips are not failures).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

_SHIM = {
    "horovod/__init__.py": """
        # The runner's shim: Horovod's module names, stratagem.horovod's behaviour.
        import sys
        import types

        import stratagem.horovod as _hvd


        class _Torch(types.ModuleType):
            def __getattr__(self, name):
                return getattr(_hvd, name)


        torch = _Torch(__name__ + ".torch", _hvd.__doc__)
        # Intel's fork of Horovod (intel/intel-optimization-for-horovod, whose newer test_torch.py we run)
        # adds hvd.sycl_built() (built with SYCL for Intel GPUs) and asks it in its XPU skips; Horovod has none.
        torch.sycl_built = lambda: False
        sys.modules[torch.__name__] = torch
    """,
    "horovod/runner/__init__.py": "",
    "horovod/runner/util/__init__.py": "",
    "horovod/runner/util/threads.py": """
        import threading

        def in_thread(target, args=(), name=None, daemon=True, silent=False):
            thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
            thread.start()
            return thread
    """,
    "mock.py": "from unittest.mock import *  # noqa: F401,F403\n",
    "cloudpickle.py": """
        def dumps(*args, **kwargs):
            raise NotImplementedError("cloudpickle is not provided by the Horovod test runner")

        loads = dumps
    """,
    "_hvd_outcome.py": """
        # A pytest plugin: writes this rank's outcome of each test to $HVD_UPSTREAM_OUT/rank<R>.json.
        import inspect
        import json
        import os

        import torch

        if not hasattr(inspect, "getargspec"):  # removed in Python 3.11; Horovod's tests call it
            inspect.getargspec = inspect.getfullargspec
        if os.environ.get("HVD_UPSTREAM_HIDE_MUON") == "1":
            # torch.optim.Muon (in torch 2.13, newer than the test file) refuses 1-D parameters in its
            # own constructor, and Horovod's tests build every torch.optim optimizer over models with biases.
            _all = type.__subclasses__
            torch.optim.Optimizer.__subclasses__ = staticmethod(
                lambda: [c for c in _all(torch.optim.Optimizer) if c.__name__ != "Muon"])

        _results = {}

        def _reason(report):
            if report.skipped and isinstance(report.longrepr, tuple):
                return report.longrepr[2]
            crash = getattr(report.longrepr, "reprcrash", None)
            return crash.message if crash is not None else str(report.longrepr)[-800:]

        def pytest_runtest_logreport(report):
            # "unfinished" until the test's call passes: a rank stopped mid-test (its peer failed) did not pass.
            entry = _results.setdefault(report.nodeid.split("::")[-1],
                                        {"outcome": "unfinished", "reason": "stopped before the test finished"})
            if report.failed:
                entry.update(outcome="failed" if report.when == "call" else "error", reason=_reason(report))
            elif report.skipped:
                entry.update(outcome="skipped", reason=_reason(report))
            elif report.when == "call" and entry["outcome"] == "unfinished":
                entry.update(outcome="passed", reason="")
            path = os.path.join(os.environ["HVD_UPSTREAM_OUT"], "rank%s.json" % os.environ.get("RANK", "0"))
            with open(path, "w") as file:
                json.dump(_results, file)
    """,
}


def write_shim(folder: Path) -> None:
    """Writes the ``horovod`` re-export package and the helper stand-ins into ``folder``."""
    for name, text in _SHIM.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def collect(path: Path) -> list[tuple[str, str]]:
    """(class, test) pairs of a unittest file, in file order; a later method of the same name wins, as in Python."""
    tests: dict[tuple[str, str], None] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                    tests.pop((node.name, item.name), None)
                    tests[(node.name, item.name)] = None
    return list(tests)


def run_test(path: Path, cls: str, test: str, *, num_processes: int, timeout_s: float, shim: Path,
             hide_muon: bool = False) -> dict:
    """Runs one test as its own job; returns every rank's outcome and the job's exit status."""
    out = Path(tempfile.mkdtemp(prefix="hvd-upstream-"))
    stratagem = shutil.which("stratagem", path=str(Path(sys.executable).parent)) or "stratagem"
    command = [stratagem, "run", "-np", str(num_processes), "--timeout", str(max(10, int(timeout_s / 3))),
               "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_hvd_outcome", f"{path}::{cls}::{test}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]),
               HVD_UPSTREAM_OUT=str(out), HVD_UPSTREAM_HIDE_MUON="1" if hide_muon else "0")
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=shim, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        log, _ = process.communicate(timeout=timeout_s)
        status: int | str = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the launcher and its workers: a new session of their own
        log, _ = process.communicate()
        status = f"timeout after {timeout_s:g} s"
    ranks = {}
    for rank in range(num_processes):
        report = out / f"rank{rank}.json"
        result = json.loads(report.read_text()).get(test) if report.exists() else None
        ranks[rank] = result or {"outcome": "crashed", "reason": f"no outcome (job status {status})"}
    shutil.rmtree(out, ignore_errors=True)
    return {"test": test, "status": status, "seconds": round(time.monotonic() - start, 1), "ranks": ranks,
            "verdict": _verdict(ranks), "log_tail": "\n".join(log.splitlines()[-25:])}


def _verdict(ranks: dict) -> str:
    outcomes = {r["outcome"] for r in ranks.values()}
    if outcomes == {"passed"}:
        return "passed"
    if outcomes <= {"passed", "skipped"}:
        return "skipped"
    return "failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="Horovod test files (unittest style)")
    parser.add_argument("-k", default="", help="comma-separated substrings; run only tests whose name has one")
    parser.add_argument("--part", default="1/1", metavar="I/N",
                        help="run only the I-th of N interleaved parts of the tests (to keep each run short)")
    parser.add_argument("-np", dest="num_processes", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per test job (default 180)")
    parser.add_argument("--json", type=Path, default=None, help="write every result here")
    parser.add_argument("--hide-muon", action="store_true",
                        help="hide torch.optim.Muon (2-D parameters only) from the tests that build "
                        "every torch.optim optimizer")
    args = parser.parse_args(argv)
    shim = Path(tempfile.mkdtemp(prefix="hvd-shim-"))
    write_shim(shim)
    results = []
    part, parts = (int(n) for n in args.part.split("/"))
    tests = [(path, cls, test) for path in args.paths for cls, test in collect(path.resolve())
             if not args.k or any(piece in test for piece in args.k.split(","))]
    try:
        for index, (path, cls, test) in enumerate(tests):
            if index % parts == part - 1:
                result = run_test(path.resolve(), cls, test, num_processes=args.num_processes,
                                  timeout_s=args.timeout, shim=shim, hide_muon=args.hide_muon)
                result["file"] = path.name
                results.append(result)
                print(_line(result), flush=True)
    finally:
        shutil.rmtree(shim, ignore_errors=True)
    counts = {v: sum(r["verdict"] == v for r in results) for v in ("passed", "skipped", "failed")}
    print(f"\n{len(results)} tests: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if counts["failed"] else 0


def _line(result: dict) -> str:
    reasons = sorted({f"rank {r}: {o['outcome']}: {o['reason'].splitlines()[0][:150]}" if o["reason"] else ""
                      for r, o in result["ranks"].items()} - {""})
    return f"{result['verdict']:8} {result['seconds']:6.1f}s {result['file']}::{result['test']}" + (
        "" if result["verdict"] == "passed" else "\n         " + "\n         ".join(reasons))


if __name__ == "__main__":
    sys.exit(main())
