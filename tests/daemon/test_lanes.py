"""Lane persistence and process watching (real processes, real /proc)."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from agentcoordd.coord.keepalive import Fence
from agentcoordd.daemon.lanes import (
    LaneRegistry,
    LaneSpec,
    find_agent_ancestor,
    pid_alive,
    process_start_time,
)


def spec(agent: str = "agent-a") -> LaneSpec:
    return LaneSpec(
        agent_id=agent, ttl=120, renew_every=40.0, idle_timeout=7200.0,
        backend={"kind": "local", "root": "/tmp/r", "key": "local:/tmp/r"},
        repo="acme/widgets", target="1",
        fence=Fence(repo="acme/widgets", target="1", agent_id=agent, claimed_at="2026-01-01T00:00:00Z"),
    )


def test_lanes_round_trip_atomically_and_privately(tmp_path: Path) -> None:
    registry = LaneRegistry(tmp_path / "state")
    registry.save([spec("a"), spec("b")])
    lanes, warning = LaneRegistry(tmp_path / "state").load()
    assert warning is None and [lane.agent_id for lane in lanes] == ["a", "b"]
    assert lanes[0].fence == spec("a").fence
    assert (registry.path.stat().st_mode & 0o777) == 0o600
    assert not list(registry.path.parent.glob(".lanes.json.tmp-*"))


def test_a_corrupt_lanes_file_is_set_aside_with_a_warning(tmp_path: Path) -> None:
    registry = LaneRegistry(tmp_path)
    registry.path.write_bytes(b"{not json")
    lanes, warning = registry.load()
    assert lanes == [] and warning and "lanes.json.corrupt" in warning


def test_lanes_never_persist_a_token(tmp_path: Path) -> None:
    bad = spec()
    bad.backend["api_token"] = "secret"
    with pytest.raises(ValueError):
        LaneRegistry(tmp_path).save([bad])


def test_pid_alive_tracks_exit_and_pid_reuse() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = process_start_time(child.pid)
        assert pid_alive(child.pid, start)
        assert not pid_alive(child.pid, (start or 0) + 1)  # same pid, another process
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid, start)


def test_watch_pid_auto_finds_the_nearest_agent_host(tmp_path: Path) -> None:
    host = tmp_path / "codex"
    os.symlink(sys.executable, host)
    # `codex` (a python interpreter named codex) runs a child that reports its ancestor
    script = (
        "import os, subprocess, sys;"
        "print(subprocess.run([sys.executable, '-c', "
        "'import os; from agentcoordd.daemon.lanes import find_agent_ancestor; "
        "print(find_agent_ancestor(os.getpid()))'], capture_output=True, text=True).stdout.strip());"
        "print(os.getpid())"
    )
    # a symlinked interpreter outside the venv: hand it the venv's packages
    paths = [str(Path(__file__).resolve().parents[2]), *site.getsitepackages()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    out = subprocess.run([str(host), "-c", script], capture_output=True, text=True, check=True, env=env).stdout.split()
    found, host_pid = out
    assert found == host_pid


def test_no_agent_host_ancestor_is_none() -> None:
    assert find_agent_ancestor(os.getpid(), hosts=("definitely-not-a-host",)) is None
