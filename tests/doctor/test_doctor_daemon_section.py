"""The daemon section (ours): versions, uptime, lanes, outbox, service, configured backend."""

from __future__ import annotations

import json
import time

from agentcoordd import protocol as p
from integration.helpers import Daemon, local_request


def out(result) -> str:
    return result.stdout.decode()


def test_daemon_section_is_opt_in_and_complete(daemon: Daemon) -> None:
    assert "daemon" not in json.loads(out(daemon.ctl("doctor", "--json")))
    result = daemon.ctl("doctor", "--json", "--daemon")
    assert result.returncode == 0
    section = json.loads(out(result))["daemon"]
    assert section["socket"] == str(daemon.socket)
    assert section["pid"] == daemon.proc.pid
    assert (section["daemon_version"], section["client_version"], section["version_mismatch"]) == (
        p.DAEMON_VERSION, p.DAEMON_VERSION, False)
    assert section["protocol"] == p.PROTOCOL_VERSION
    assert section["uptime_seconds"] >= 0
    assert section["state_dir"] == str(daemon.state_dir)
    assert section["lanes"]["count"] == 0 and section["lanes"]["failing"] == 0
    assert section["outbox"] == {"path": str(daemon.state_dir / "outbox.jsonl"), "depth": 0,
                                 "oldest_age_seconds": None}
    assert section["service"]["installed"] is False
    assert section["service"]["started_by"] == "manual"
    assert [f["status"] for f in section["env_files"]] == ["absent", "absent"]


def test_outbox_depth_counts_undelivered_events(daemon: Daemon) -> None:
    line = {"path": "events/b1/e1.json", "record": {"event_id": "e1"},
            # a backend nobody serves: the daemon's background retries keep them queued
            "backend": {"kind": "http", "location": "http://127.0.0.1:9", "key": "http:http://127.0.0.1:9"},
            "queued_at": time.time()}
    (daemon.state_dir / "outbox.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(
        {**line, "path": "events/b1/e2.json"}) + "\n")
    section = json.loads(out(daemon.ctl("doctor", "--json", "--daemon")))["daemon"]
    assert section["outbox"]["depth"] == 2


def test_installed_service_units_are_reported(daemon: Daemon) -> None:
    """Where `service install` writes them: $XDG_CONFIG_HOME/systemd/user (set here)."""
    units = daemon.base / "xdgconfig" / "systemd" / "user"
    units.mkdir(parents=True)
    for name in ("agentcoordd.socket", "agentcoordd.service"):
        (units / name).write_text("[Unit]\n")
    service = json.loads(out(daemon.ctl("doctor", "--json", "--daemon")))["daemon"]["service"]
    assert service["installed"] is True
    assert service["manager"] == "systemd"
    assert service["unit_files"] == [str(units / "agentcoordd.socket"),
                                     str(units / "agentcoordd.service")]


def test_unparsable_env_file_is_listed_in_the_daemon_section(daemon: Daemon) -> None:
    env_file = daemon.base / "xdgconfig" / "agent-coord" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_bytes(b"\xff\n")  # not text: unusable (a non-assignment line is skipped)
    result = daemon.ctl("doctor", "--json", "--daemon", unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 2
    section = json.loads(out(result))["daemon"]
    assert section["env_files"][0] == {"path": str(env_file), "status": "error",
                                       "error": "line 1 is not UTF-8 text"}


def test_version_mismatch_is_flagged_and_degrades_the_stack_cli_check(daemon: Daemon) -> None:
    with daemon.raw() as client:
        client.hello()
        reply = client.call(local_request(daemon, p.Doctor(stack=True, client_version="0.0.9")))
    assert reply.exit_code == 1, reply.error
    assert reply.payload["daemon"]["version_mismatch"] is True
    cli = reply.payload["stack"]["checks"][0]
    assert (cli["id"], cli["status"]) == ("cli.version", "degraded")
    assert cli["details"] == {"version": "0.0.9", "daemon_version": p.DAEMON_VERSION}
    assert reply.payload["stack"]["status"] == "degraded"


def test_daemon_text_section(daemon: Daemon) -> None:
    lines = out(daemon.ctl("doctor", "--daemon")).splitlines()
    assert "daemon" in lines
    assert f"socket: {daemon.socket}" in lines
    assert "keep_alive_lanes: 0 (0 failing)" in lines
    assert "outbox_depth: 0" in lines
    assert "service: not installed (started by manual)" in lines
