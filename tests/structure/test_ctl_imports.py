"""The common path of every command never imports typer (help only) nor typing_extensions
(agentcoordctl/__init__.py): parsing,
usage errors and the request are ours (agentcoordctl/spec.py), so a ctl call
pays only for what it runs (issue 20's start-up budget, bench/ctl_latency.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentcoordctl import cli

PROBE = """
import json, sys
from agentcoordctl import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("typer", "click", "rich", "typing_extensions"))
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


SUBCOMMAND = {"batch": "stop", "token": "provision", "fence": "check", "usage": "record",
              "capacity": "show", "reservation": "show", "limit": "list"}


def _words(name: str) -> list[str]:
    return [name, SUBCOMMAND[name]] if name in SUBCOMMAND else [name]


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_a_usage_error_of_every_command_is_reported_without_typer(name: str, tmp_path) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, *_words(name), "--no-such-option"],
                            capture_output=True, timeout=60, cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    lines = result.stderr.decode().strip().splitlines()
    report = json.loads(lines[-1])
    assert report["code"] == 1, result.stderr
    assert report["loaded"] == [], f"{name} imported {report['loaded']} on its common path"
    assert lines[0].startswith("invalid option: --no-such-option"), lines


def test_help_is_where_typer_is_loaded(tmp_path) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, "claim", "--help"], capture_output=True,
                            timeout=60, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    report = json.loads(result.stderr.decode().strip().splitlines()[-1])
    assert report["code"] == 0 and "typer" in report["loaded"]
