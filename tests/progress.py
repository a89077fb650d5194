"""Progress a person can read while the suite runs, and where its time went.

* A line per test file as soon as its last test finished: outcome counts and the
  seconds its tests took (setup + call + teardown), with the suite's elapsed wall
  time — instead of minutes of a silent percentage.
* At the end, per-directory totals (tests, seconds of test time), largest first:
  the table to look at before making the suite faster. Under pytest-xdist the
  seconds add up across workers, so their sum exceeds the wall time.

Installed by tests/conftest.py. Works with and without xdist: the controller learns
each file's test count from its own collection or from the workers'.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class FileTally:
    expected: int = 0
    finished: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    printed: bool = False


class Progress:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.files: dict[str, FileTally] = defaultdict(FileTally)
        self.started = time.monotonic()
        self.counted_from_worker = False

    def expect(self, nodeids: list[str]) -> None:
        for nodeid in nodeids:
            self.files[nodeid.split("::", 1)[0]].expected += 1

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if not hasattr(self.config, "workerinput"):  # the controller of a plain run
            self.expect([item.nodeid for item in items])

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown to a run without it
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.counted_from_worker:  # every worker collects the same ids
            self.counted_from_worker = True
            self.expect(list(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tally = self.files[report.nodeid.split("::", 1)[0]]
        tally.seconds += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            tally.outcomes["xfailed" if hasattr(report, "wasxfail") else report.outcome] += 1
        if report.when == "teardown":
            tally.finished += 1
            if not report.passed:
                tally.outcomes["error"] += 1

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        path = nodeid.split("::", 1)[0]
        tally = self.files[path]
        if tally.printed or not tally.expected or tally.finished < tally.expected:
            return
        tally.printed = True
        counts = ", ".join(f"{n} {what}" for what, n in sorted(tally.outcomes.items()))
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            if getattr(reporter._tw, "width_of_current_line", 0):  # after a run of dots
                reporter.write("\n")
            reporter.write_line(f"[{time.monotonic() - self.started:5.0f}s] {path}: {counts} "
                                f"in {tally.seconds:.1f}s")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        per_dir: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for path, tally in self.files.items():
            parts = path.split("/")
            key = "/".join(parts[:2]) if len(parts) > 2 else path
            per_dir[key][0] += sum(tally.outcomes.values())
            per_dir[key][1] += tally.seconds
        if not per_dir:
            return
        terminalreporter.section("time per directory (test seconds, summed over workers)")
        for key, (count, seconds) in sorted(per_dir.items(), key=lambda kv: -kv[1][1]):
            terminalreporter.write_line(f"{seconds:8.1f}s {int(count):5d} tests  {key}")
        terminalreporter.write_line(f"wall {time.monotonic() - self.started:.0f}s")


def install(config: pytest.Config) -> None:
    """Register on the controller (or a plain run): workers report to it. Verbose runs
    already print a line per test."""
    if not hasattr(config, "workerinput") and config.getoption("verbose") <= 0:
        config.pluginmanager.register(Progress(config), "agentcoord-progress")
