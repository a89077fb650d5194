"""The differential tester's harness (tests/conformance/differential.py) without
the Ruby tool: agentcoordctl on both sides finds nothing, a planted difference
is found, shrunk and printed as a runnable scenario. The hunt itself
(scripts/differential) needs agent-coord and is not part of the suite."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from conformance.differential import (
    Cmd,
    Differential,
    Put,
    WFile,
    WORK_DIR_MARK,
    bash_quote,
    reproducer,
    sequences,
)
from conformance.harness import ctl_path

pytestmark = pytest.mark.slow

A = ("--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")
MANIFEST = '{"batch_id":"b1","repo":"acme/widgets","lanes":[{"name":"backend","owner":"agent-a","targets":["1"]}]}'
LIFECYCLE = [
    WFile("m.json", MANIFEST),
    Cmd(("register-batch", "--file", WORK_DIR_MARK + "/m.json")),
    Cmd(("claim", *A, "--batch-id", "b1")),
    Cmd(("release", *A, "--terminal", "done")),
    Cmd(("status",)),
    Cmd(("batch-audit", "--batch-id", "b1", "--json")),
    Cmd(("gc", "--dry-run")),
]


def _ours() -> Differential:
    ctl = ctl_path()
    return Differential(peer=[str(ctl)], ours=[str(ctl)], path_first=str(ctl.parent))


def test_the_same_tool_on_both_sides_differs_nowhere() -> None:
    diff = _ours()
    assert diff.run(LIFECYCLE) == []
    assert (diff.sequences, diff.steps) == (1, 6)


@settings(max_examples=3, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(sequences(max_steps=3))
def test_generated_sequences_run_the_same_on_the_same_tool(items: list) -> None:
    assert _ours().run(items) == []


def test_a_planted_difference_is_found_and_printed_as_a_scenario(tmp_path: Path) -> None:
    """A 'peer' that prints one more status line: the harness names the step and
    the kind; the reproducer is bash the kit's driver accepts."""
    peer = tmp_path / "peer"
    peer.write_text(f'#!/usr/bin/env bash\n"{ctl_path()}" "$@"; rc=$?\n'
                    '[ "$1" = status ] && echo "- planted"\nexit $rc\n')
    peer.chmod(peer.stat().st_mode | stat.S_IXUSR)
    diff = Differential(peer=[str(peer)], ours=[str(ctl_path())], path_first=str(ctl_path().parent))
    items = [Put("heartbeats/agent-a.json", '{"schema_version":1,"agent_id":"agent-a","status":"in_progress",'
                 '"updated_at":"{{NOW-1m}}","expires_at":"{{NOW+14m}}"}'),
             Cmd(("claim", *A)), Cmd(("status",))]
    found = diff.run(items)
    assert [(f.cmd.command if f.cmd else None, f.diff.kind, f.diff.step) for f in found] == [
        ("status", "stdout-text", 3)]
    assert "- planted" in found[0].describe()
    script = reproducer("planted", found[0].describe().splitlines()[0], items)
    assert "  run -- status\n" in script and "  put heartbeats/agent-a.json <<'EOF'\n" in script
    driver = tmp_path / "driver.sh"
    driver.write_text("scenario() { :; }\nbegin() { :; }\nput() { cat >/dev/null; }\n"
                      "run() { printf '%s\\n' \"$@\"; }\nfinish() { :; }\n" + script + "planted\n")
    out = subprocess.run(["bash", str(driver)], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-2:] == ["--", "status"]


@pytest.mark.parametrize("arg", ["line\nbreak", "tab\there", "it's", "caf\u00e9 \u2603", "x\u202ey", ""])
def test_arguments_are_one_shell_word_on_one_line(arg: str) -> None:
    quoted = bash_quote(arg)
    assert "\n" not in quoted
    out = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, env={
        **os.environ, "LC_ALL": "C.UTF-8"}).stdout
    assert out == arg.encode("utf-8")
