"""A replica that stops answering inside DDP's gradient all-reduce is the one the launcher names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "scripts" / "hang_in_step.py"


def test_sigstopped_rank_is_named_by_its_peer_and_the_launcher() -> None:
    env = dict(os.environ, STRATAGEM_TIMEOUT_S="3")  # the peer's all-reduce gives up after 3 s
    proc = subprocess.run([sys.executable, "-m", "stratagem.launcher.cli", "run", "-n", "2", "--grace-period", "1",
                           str(SCRIPT), "1", "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = proc.stderr[proc.stderr.rindex("stratagem: Worker"):]
    assert report.startswith("stratagem: Worker rank 1 (of 2) was stopped"), report[:500]
    # Rank 0's own error names the operation and the rank that did not answer, not a raw gloo timeout.
    # ... and each rank with its host (issue 21 item 5).
    assert "rank 0 raised CollectiveTimeoutError: [rank 0/2 at 127.0.0.1] fit: the gradient all-reduce did not complete" \
        in report
    assert "unresponsive_ranks=[1]" in report
