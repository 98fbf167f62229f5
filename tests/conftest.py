"""Shared fixtures: environment hygiene, no leftover process group, no leftover strategy.

Also the per-file time guard of ``make test`` (``--max-file-seconds``): the suite's
time budget is kept file by file, so one slow file is named the day it appears.
And, under pytest-xdist (``make test`` runs ``-n 3 --dist loadfile``), the order
files are handed out in: process-starting tiers first (e2e, then dist), so the
longest files do not start last and leave one worker running alone at the end.
"""

from __future__ import annotations

import gc
import json
import os
from collections import defaultdict
from pathlib import Path

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
    parser.addoption("--file-times-to", default=None, metavar="PATH",
                     help="with --max-file-seconds: write every file's wall and CPU seconds to PATH (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its share of the cores, not all of them
        import torch

        # NOTE: each worker's torch would run one thread per core beside the other worker's: spinning threads
        # on oversubscribed cores burn CPU time and gain nothing. Children get their own counts (launcher, warm).
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(config.workerinput["workercount"])))
        from stratagem.testing.warm_processes import start_warm_server

        # The warm server's imports overlap this worker's collection: charged to no test file (it was the first
        # warm test's, up to ~4 s of a file's time beside the other workers, e.g. test_elastic's).
        start_warm_server()
    limit = config.getoption("--max-file-seconds")
    if limit is not None:
        guard = FileTimeGuard(limit, slow_files_to=config.getoption("--slow-files-to"),
                              file_times_to=config.getoption("--file-times-to"))
        config.pluginmanager.register(guard, "stratagem-file-time-guard")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, so collections still match
        items.sort(key=_tier)


def pytest_collection_finish(session: pytest.Session) -> None:
    # NOTE: collection imported torch, Keras and every test module; their objects live as long as the session.
    # Frozen, the collector's full passes during the tests traverse only what the tests made (measured: the unit
    # tier's CPU time 66.8 -> 63.1 s on two xdist workers).
    gc.freeze()


def _tier(item: pytest.Item) -> int:
    return 0 if item.get_closest_marker("e2e") else 1 if item.get_closest_marker("dist") else 2


def tree_cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) of ``pid`` and its live descendants, each with the children it reaped (Linux).

    A worker forked by the warm server and reaped there counts in the server's
    children times, a launched worker in its launcher's: the whole tree's work,
    which a busy machine's wall time does not show.
    """
    root = os.getpid() if pid is None else pid
    parents, ticks = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        ticks[child] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier and child not in tree]
        tree.update(frontier)
    return sum(ticks.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


class FileTimeGuard:
    """Sums each test file's phase durations; a file over ``limit_s`` fails the session.

    With ``slow_files_to`` the files over the limit are written there instead: beside
    another xdist worker a file can take up to twice its time alone, so ``make test``
    times those files again on their own, and only a file still over the limit fails.
    Each file's CPU seconds (its process tree's, ``tree_cpu_seconds``) are shown beside
    its wall time: on a shared machine they are the steadier figure.
    """

    def __init__(self, limit_s: float, *, slow_files_to: str | None = None, file_times_to: str | None = None) -> None:
        self.limit_s, self.slow_files_to, self.file_times_to = limit_s, slow_files_to, file_times_to
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu_seconds: dict[str, float] = defaultdict(float)
        self._next_item: pytest.Item | None = None
        self._file_start_cpu = 0.0
        self._previous_path: Path | None = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
        self._next_item = nextitem
        if item.path != self._previous_path:  # a file's first test (xdist's loadfile keeps a file's tests together)
            self._file_start_cpu = tree_cpu_seconds()
        self._previous_path = item.path
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
        outcome = yield
        if call.when == "teardown" and (self._next_item is None or self._next_item.path != item.path):
            # The file's last teardown (its module fixtures' too): its CPU travels to the xdist controller here.
            outcome.get_result().user_properties.append(("file_cpu_s", tree_cpu_seconds() - self._file_start_cpu))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Module-scoped fixtures land in their first test's setup and last test's teardown: counted here too.
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] += report.duration
        self.cpu_seconds[path] += sum(value for name, value in report.user_properties if name == "file_cpu_s")
    def slow_files(self) -> list[str]:
        return sorted(path for path, seconds in self.seconds.items() if seconds > self.limit_s)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller sums every worker's reports
            return
        if self.file_times_to is not None:
            with open(self.file_times_to, "w", encoding="utf-8") as f:
                json.dump({path: {"wall_s": round(seconds, 2), "cpu_s": round(self.cpu_seconds[path], 2)}
                           for path, seconds in sorted(self.seconds.items(), key=lambda item: -item[1])}, f, indent=1)
        if self.slow_files_to is not None:
            with open(self.slow_files_to, "w", encoding="utf-8") as f:
                f.writelines(f"{path}\n" for path in self.slow_files())
        elif self.slow_files() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        slowest = sorted(self.seconds.items(), key=lambda item: -item[1])[:10]
        terminalreporter.write_sep("=", f"slowest test files (limit {self.limit_s:g} s per file)")
        for path, seconds in slowest:
            terminalreporter.write_line(f"{seconds:8.1f} s  (CPU {self.cpu_seconds[path]:6.1f} s)  {path}")
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
