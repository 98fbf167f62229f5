"""Shared fixtures: environment hygiene, no leftover process group, no leftover strategy.

Also the per-file time guard of ``make test`` (``--max-file-seconds``): the suite's
time budget is kept file by file, so one slow file is named the day it appears.
And, under pytest-xdist (``make test`` runs ``-n 2 --dist loadfile``), the order
files are handed out in: process-starting tiers first (e2e, then dist), so the
longest files do not start last and leave one worker running alone at the end.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

# A test that builds MirroredStrategy(num_replicas>1) outside a worker must get
# a clear error, never a second copy of pytest started as its "replicas".
os.environ["STRATAGEM_DISABLE_SCRIPT_LAUNCH"] = "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--max-file-seconds", type=float, default=None, metavar="SECONDS",
                     help="fail the run when one test file's tests (setup, call and teardown) take longer than "
                          "this in all; prints the ten slowest files")
    parser.addoption("--slow-files-to", default=None, metavar="PATH",
                     help="with --max-file-seconds: write the files over the limit to PATH (one a line) instead of "
                          "failing, to time them again alone (make test does, after its parallel run)")


def pytest_configure(config: pytest.Config) -> None:
    limit = config.getoption("--max-file-seconds")
    if limit is not None:
        guard = FileTimeGuard(limit, slow_files_to=config.getoption("--slow-files-to"))
        config.pluginmanager.register(guard, "stratagem-file-time-guard")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, so collections still match
        items.sort(key=_tier)


def _tier(item: pytest.Item) -> int:
    return 0 if item.get_closest_marker("e2e") else 1 if item.get_closest_marker("dist") else 2


class FileTimeGuard:
    """Sums each test file's phase durations; a file over ``limit_s`` fails the session.

    With ``slow_files_to`` the files over the limit are written there instead: beside
    another xdist worker a file can take up to twice its time alone, so ``make test``
    times those files again on their own, and only a file still over the limit fails.
    """

    def __init__(self, limit_s: float, *, slow_files_to: str | None = None) -> None:
        self.limit_s, self.slow_files_to = limit_s, slow_files_to
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Module-scoped fixtures land in their first test's setup and last test's teardown: counted here too.
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def slow_files(self) -> list[str]:
        return sorted(path for path, seconds in self.seconds.items() if seconds > self.limit_s)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller sums every worker's reports
            return
        if self.slow_files_to is not None:
            with open(self.slow_files_to, "w", encoding="utf-8") as f:
                f.writelines(f"{path}\n" for path in self.slow_files())
        elif self.slow_files() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        slowest = sorted(self.seconds.items(), key=lambda item: -item[1])[:10]
        terminalreporter.write_sep("=", f"slowest test files (limit {self.limit_s:g} s per file)")
        for path, seconds in slowest:
            terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
        slow = self.slow_files()
        if slow and self.slow_files_to is not None:
            terminalreporter.write_line(f"over {self.limit_s:g} s beside another worker, to be timed alone: "
                                        f"{', '.join(slow)}")
        elif slow:
            terminalreporter.write_line(
                f"FAILED: {len(slow)} test file(s) took longer than {self.limit_s:g} s: {', '.join(slow)}. Make their "
                "processes cheaper (stratagem.testing's warm workers), their steps fewer or their waits shorter.",
                red=True)


@pytest.fixture(autouse=True)
def _clean_environment():
    before = dict(os.environ)
    yield
    # torch sets a few of its own on first use of some features; those are not ours.
    leaked = sorted(k for k in set(os.environ) - set(before) if not k.startswith(("TORCHINDUCTOR_", "TRITON_")))
    os.environ.clear()
    os.environ.update(before)
    from stratagem.distribute import collectives, context

    collectives.destroy_process_group()
    context.reset()
    if leaked:
        pytest.fail(f"test leaked environment variables: {leaked}")
