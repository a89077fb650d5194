"""`agentcoordctl doctor` stays a thin client: no daemon-side libraries in ctl."""

from __future__ import annotations

import json
import subprocess

from integration.helpers import PYTHON, Daemon
from integration.test_import_hygiene import PROBE


def test_doctor_never_imports_daemon_side_libraries(daemon: Daemon) -> None:
    result = subprocess.run([PYTHON, "-c", PROBE, "doctor", "--deep", "--json"],
                            env=daemon.env(), capture_output=True, timeout=30,
                            cwd=str(daemon.base))
    report = json.loads(result.stderr.decode().strip().splitlines()[-1])
    assert report["code"] == 0, result.stderr
    assert report["loaded"] == []
