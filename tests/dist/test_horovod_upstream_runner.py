"""bench/horovod_upstream.py, which runs Horovod's own test files: its shim and every rank's outcome.

Horovod's files are not vendored, so this runs a small unittest file of the
same shape through the runner: one ``stratagem run -np 2`` job per test,
``import horovod.torch as hvd`` resolved to stratagem.horovod.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.e2e

_TESTS = """
    import time
    import unittest

    import torch

    import horovod.torch as hvd


    class RunnerTests(unittest.TestCase):
        def test_through_the_shim(self):
            hvd.init()
            assert not hvd.sycl_built()  # Intel's fork asks it; stratagem.horovod has none
            assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()

        def test_rank_1_fails(self):
            hvd.init()
            if hvd.rank() == 1:
                raise AssertionError("rank 1 fails")
            time.sleep(60)  # rank 0 is still inside the test when the launcher stops it
"""


def _runner() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "horovod_upstream.py"
    spec = importlib.util.spec_from_file_location("horovod_upstream", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runner_reports_each_rank_and_never_passes_a_rank_stopped_mid_test(tmp_path: Path) -> None:
    runner = _runner()
    tests = tmp_path / "test_shape_of_horovods.py"
    tests.write_text(textwrap.dedent(_TESTS))
    shim = tmp_path / "shim"
    runner.write_shim(shim)
    assert runner.collect(tests) == [("RunnerTests", "test_through_the_shim"), ("RunnerTests", "test_rank_1_fails")]
    passed = runner.run_test(tests, "RunnerTests", "test_through_the_shim", num_processes=2, timeout_s=60, shim=shim)
    assert passed["verdict"] == "passed", passed
    # Rank 1's clean exit waits for rank 0 (still in its test) up to the job's collective timeout, timeout_s / 3
    # (10 s at least) before the launcher stops rank 0: 30 s gives 10 s, where 60 s left the job idle 20 s.
    failed = runner.run_test(tests, "RunnerTests", "test_rank_1_fails", num_processes=2, timeout_s=30, shim=shim)
    assert failed["verdict"] == "failed"
    assert failed["ranks"][1]["outcome"] == "failed" and "rank 1 fails" in failed["ranks"][1]["reason"]
    assert failed["ranks"][0]["outcome"] in ("unfinished", "crashed"), failed["ranks"][0]
