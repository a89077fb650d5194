"""ctl start-up stays light: no daemon-side libraries in the client process."""

from __future__ import annotations

import json
import subprocess

import pytest

from .helpers import PYTHON, Daemon

FORBIDDEN = ("anyio", "httpx", "structlog", "pydantic", "rich")
FORBIDDEN_PREFIXES = ("agentcoordd.daemon", "agentcoordd.coord", "agentcoordd.store")

PROBE = """
import json, sys
from agentcoordctl import cli
code = cli.main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {forbidden!r}
                or m.startswith({prefixes!r}))
print(json.dumps({{"code": code, "loaded": loaded}}), file=sys.stderr)
""".format(forbidden=set(FORBIDDEN), prefixes=FORBIDDEN_PREFIXES)


@pytest.mark.parametrize("args", [
    ("heartbeat", "--agent-id", "agent-a"),
    ("status", "--repo", "acme/widgets", "--target", "1", "--json"),
    ("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1"),
    ("version", "--json"),
])
def test_ctl_command_never_imports_daemon_side_libraries(daemon: Daemon, args: tuple[str, ...]) -> None:
    result = subprocess.run([PYTHON, "-c", PROBE, *args], env=daemon.env(), capture_output=True,
                            timeout=30, cwd=str(daemon.base))
    report = json.loads(result.stderr.decode().strip().splitlines()[-1])
    assert report["code"] == 0, result.stderr
    assert report["loaded"] == []
