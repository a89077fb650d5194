"""The CLI fuzzer: every command of the real app with generated hostile
arguments (non-finite and huge numbers, control and bidi characters, 10 MB
strings, bytes that are not UTF-8, stray words) against a live daemon. Never
a traceback or an internal error, exit only 0/1/2/3, no file outside the
state root and the caller's own directories. CI size here; bench/reliability.py
runs it at full size."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from integration.helpers import Daemon

from . import clifuzz

INVOCATIONS = int(os.environ.get("AGENT_COORD_FUZZ_CLI", "600"))
CATALOG = clifuzz.commands()


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Any, Path]]:
    import tempfile

    from integration.helpers import make_daemon

    base = Path(tempfile.mkdtemp(prefix="acfz.", dir="/tmp"))
    d = make_daemon(base)
    d.start()
    cwd = base / "cwd"
    cwd.mkdir()
    empty_path = base / "no-programs"
    empty_path.mkdir()
    env = d.env(PATH=str(empty_path), AGENT_COORD_TIMEOUT="10")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                         str(Path(__file__).resolve().parents[1])])
    worker = clifuzz.Worker(env, cwd)
    try:
        yield d, worker, base
    finally:
        worker.close()
        d.stop()


def test_the_catalog_covers_every_command() -> None:
    names = {c.path[0] for c in CATALOG}
    from agentcoordctl.cli import COMMANDS

    assert names | {"run", "demo"} == set(COMMANDS)


@settings(max_examples=INVOCATIONS, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=__import__("hypothesis").strategies.data())
def test_no_argument_list_breaks_the_cli_contract(fuzz_target: tuple[Daemon, Any, Path],
                                                  data: Any) -> None:
    d, worker, base = fuzz_target
    args = data.draw(clifuzz.invocations(CATALOG, str(d.root)))
    result = worker.call(args)
    problem = clifuzz.verdict(args, result)
    assert problem is None, f"{[a[:80] for a in args]}: {problem}"
    assert d.proc is not None and d.proc.poll() is None, "the daemon died"
    allowed = [d.root, d.base / "home", d.base / "xdgstate", d.base / "xdgconfig", d.state_dir,
               d.log_path, d.base / "run"]
    assert clifuzz.files_outside(base, allowed) == []
