"""The new ctl commands keep ctl start-up light: no daemon-side libraries in the client."""

from __future__ import annotations

import json
import subprocess

import pytest

from integration.helpers import PYTHON, Daemon, interrupt, read_until, reaped
from integration.test_import_hygiene import PROBE


def report(result_stderr: bytes) -> dict:
    return json.loads(result_stderr.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("args", [
    ("batch", "stop", "--batch-id", "b1"),
    ("batch", "stopped", "--batch-id", "b1", "--json"),
    ("health", "--json"),
    ("dashboard",),
    ("heartbeat", "--agent-id", "agent-a", "--json"),
])
def test_new_commands_never_import_daemon_side_libraries(daemon: Daemon, batch: dict,
                                                        args: tuple[str, ...]) -> None:
    result = subprocess.run([PYTHON, "-c", PROBE, *args], env=daemon.env(), capture_output=True,
                            timeout=30, cwd=str(daemon.base))
    found = report(result.stderr)
    assert found["code"] in (0, 1), result.stderr  # health: 1 = warnings
    assert found["loaded"] == []


def test_status_watch_never_imports_daemon_side_libraries(daemon: Daemon, batch: dict) -> None:
    proc = subprocess.Popen([PYTHON, "-c", PROBE, "status", "--watch", "--interval", "0.2"],
                            env=daemon.env(), cwd=str(daemon.base), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    with reaped(proc):
        # Ctrl-C once two frames are out (the second after a full refresh), never at a fixed
        # time: a slow start-up would get it mid-import instead of in the watch loop
        frames = read_until(proc.stdout.fileno(), lambda d: d.count(b"batches (1)") >= 2)
        out, err = interrupt(proc)
    found = report(err)
    assert found == {"code": 0, "loaded": []}
    assert b"batches (1)" in frames + out
