"""One run per scenario per session, shared by the strict, message and
allow-list tests, executed ahead in parallel processes.

Scenarios are independent: each gets a fresh mktemp work dir with its own
HOME, XDG dirs and state root, so its own autostarted agentcoordd (which exits
when the driver removes that dir). The first test that needs a run submits
every scenario the session selected, in test order, to a pool of
AGENTCOORD_CONFORMANCE_JOBS workers (default: the CPU count); each test then
waits only for its own scenario. Under pytest-xdist each worker runs what it
asks for, without running ahead.

AGENTCOORD_CONFORMANCE_OUT=DIR keeps every scenario's output (OUT_DIR of the
driver: <set>/<scenario>/<scenario>.txt and .messages.txt) for inspection.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.harness import SCENARIOS, Runner

_RUNNER: list[Runner] = []


def _wanted(session: pytest.Session) -> list[str]:
    """Scenario names the selected tests need, in test order."""
    names: list[str] = []
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = params.get("scenario") or getattr(params.get("allowance"), "scenario", None)
        if name in SCENARIOS and name not in names:
            names.append(name)
    return names


@pytest.fixture(scope="session")
def conformance(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    keep = os.environ.get("AGENTCOORD_CONFORMANCE_OUT")
    out_root = Path(keep).resolve() if keep else tmp_path_factory.mktemp("conformance")
    jobs = int(os.environ.get("AGENTCOORD_CONFORMANCE_JOBS") or os.cpu_count() or 2)
    runner = Runner(out_root, max(1, jobs))
    _RUNNER.append(runner)
    if not hasattr(request.config, "workerinput"):  # not an xdist worker: run ahead
        for name in _wanted(request.session):
            runner.submit(SCENARIOS[name])
    yield runner
    runner.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    """Timing of the scenario runs (wall time per scenario, slowest first)."""
    if not _RUNNER or not _RUNNER[0].runs:
        return
    runner = _RUNNER[0]
    runs = sorted(runner.runs, key=lambda r: -r.seconds)
    by_set: dict[str, float] = {}
    for r in runs:
        by_set[r.scenario.set] = by_set.get(r.scenario.set, 0.0) + r.seconds
    sets = ", ".join(f"{k}: {len([r for r in runs if r.scenario.set == k])} in {v:.1f}s"
                     for k, v in sorted(by_set.items()))
    tr = terminalreporter
    tr.write_sep("-", "conformance scenario timings")
    tr.write_line(f"{len(runs)} scenarios, {runner.jobs} parallel job(s); "
                  f"summed scenario time {sum(by_set.values()):.1f}s ({sets})")
    tr.write_line("slowest: " + ", ".join(f"{r.scenario.name} {r.seconds:.1f}s" for r in runs[:5]))
