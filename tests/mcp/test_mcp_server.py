"""agentcoord-mcp driven as an agent host drives it: the MCP SDK's own stdio client
starts the console script as a separate process, against a real agentcoordd on a
temp socket and a local state root (docs/mcp.md)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters, stdio_client

from agentcoordctl.options import dump_json
from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures
from integration.helpers import Daemon, make_daemon

SERVER = str(Path(sys.executable).with_name("agentcoord-mcp"))
HOST = str(Path(__file__).with_name("mcp_host.py"))
TOOLS = {"claim", "heartbeat", "release", "status", "record_event", "batch_audit", "doctor",
         "answer", "wait_answer", "events", "ready", "claim_next", "register_batch", "wait_ready",
         "limit_report"}


@contextlib.asynccontextmanager
async def server(d: Daemon, agent_id: str | None, **env: str) -> AsyncIterator[Client]:
    full = d.env(**env)
    if agent_id:
        full["AGENT_COORD_AGENT_ID"] = agent_id
    log = d.base / f"mcp-{agent_id}.log"
    with open(log, "a") as errlog:
        params = StdioServerParameters(command=SERVER, env=full, cwd=str(d.base))
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


def result(call: Any) -> dict[str, Any]:
    """A tool result as the agent reads it: is_error, the structured JSON, the texts."""
    return {"is_error": call.is_error, "json": call.structured_content,
            "texts": [block.text for block in call.content]}


def assert_usage(call: Any, *words: str) -> None:
    got = result(call)
    assert got["is_error"] and got["json"]["exit_class"] == "usage", got
    assert got["json"]["exit_code"] == 1 and got["json"]["message"], got
    for word in words:
        assert word in got["json"]["message"], got


async def test_tools_list_with_schemas_from_the_protocol_structs(daemon: Daemon) -> None:
    async with server(daemon, "agent-a") as a:
        listed = {tool.name: tool for tool in (await a.list_tools()).tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False, tool.name
        assert not {"caller", "selection", "timeout", "op"} & set(schema["properties"]), tool.name
        assert tool.description
    claim = listed["claim"].input_schema
    assert claim["required"] == ["repo", "target"]  # agent_id comes from the configuration
    assert claim["properties"]["agent_id"]["default"] == "agent-a"
    assert claim["properties"]["ttl"]["anyOf"][0]["type"] == "integer"
    assert "KeepAlive" in claim["$defs"] and "Metadata" in claim["$defs"]
    assert listed["status"].annotations.read_only_hint is True


async def test_claim_refusal_heartbeat_status_release_and_hostile_arguments(daemon: Daemon) -> None:
    target = {"repo": "o/r", "target": "7"}
    attribution = {"AGENT_COORD_MACHINE_ID": "m5", "AGENT_COORD_SESSION_ID": "session-a"}
    async with server(daemon, "agent-a", **attribution) as a, server(daemon, "agent-b") as b:
        claimed = result(await a.call_tool("claim", target))
        assert not claimed["is_error"], claimed
        assert claimed["json"]["action"] == "acquired"
        assert claimed["json"]["claim"]["agent_id"] == "agent-a"
        assert claimed["texts"][0] == dump_json(claimed["json"])  # what `claim --json` prints

        refused = result(await b.call_tool("claim", target))
        cli = daemon.ctl("claim", "--agent-id", "agent-b", "--repo", "o/r", "--target", "7",
                         "--json")
        assert refused["is_error"] and refused["json"]["exit_class"] == "refused", refused
        assert refused["json"]["exit_code"] == cli.returncode == 3
        assert refused["json"]["message"] == cli.stderr.decode().strip().splitlines()[-1]
        assert refused["json"]["message"].startswith("CLAIM_REFUSED:")

        beat = result(await a.call_tool("heartbeat", {**target, "status": "waiting_on_checks_or_review"}))
        assert not beat["is_error"], beat
        assert beat["json"]["heartbeat"]["agent_id"] == "agent-a"
        assert beat["json"]["heartbeat"]["status"] == "waiting_on_checks_or_review"
        # Attribution as for ctl: the server's environment is the caller's.
        assert beat["json"]["heartbeat"]["machine_id"] == "m5"
        assert beat["json"]["heartbeat"]["session_id"] == "session-a"

        scoped = result(await a.call_tool("status", target))
        cli_status = daemon.ctl("status", "--repo", "o/r", "--target", "7", "--json")
        assert not scoped["is_error"], scoped
        assert scoped["json"] == json.loads(cli_status.stdout)  # the same JSON as ctl's
        assert [c["agent_id"] for c in scoped["json"]["claims"]] == ["agent-a"]

        # Hostile arguments: each a usage-class error, and the server keeps serving.
        assert_usage(await a.call_tool("claim", {"repo": 5, "target": "7"}), "repo")
        assert_usage(await a.call_tool("claim", {"repo": "o/r", "target": "x" * 3_000_000}),
                     "limit")
        assert_usage(await a.call_tool("claim", {"repo": "o/r", "target": "../../etc"}),
                     "invalid target")
        assert_usage(await a.call_tool("claim", {**target, "agent_id": "agent-b"}),
                     "agent id")
        assert_usage(await a.call_tool("claim", {**target, "caller": {"pid": 1}}),
                     "unknown argument")
        assert_usage(await a.call_tool("claim", {**target, "keep_alive": True}), "keep_alive")
        assert_usage(await a.call_tool("status", {"events": 2**60}), "events")

        released = result(await a.call_tool("release", target))
        assert not released["is_error"], released
        assert released["json"]["action"] == "released"
        after = result(await b.call_tool("claim", target))  # free again: b takes it
        assert not after["is_error"] and after["json"]["claim"]["agent_id"] == "agent-b", after
    assert daemon.proc is not None and daemon.proc.poll() is None


async def test_record_event_batch_audit_and_doctor_answer_as_ctl(daemon: Daemon) -> None:
    async with server(daemon, "agent-a") as a:
        bad = result(await a.call_tool("record_event", {
            "batch_id": "b1", "type": "help_requested", "typed": {"reason": "lunch"}}))
        audit = result(await a.call_tool("batch_audit", {"batch_id": "b1"}))
        doctor = result(await a.call_tool("doctor", {}))
    cli_event = daemon.ctl("record-event", "--batch-id", "b1", "--type", "help_requested",
                           "--reason", "lunch", "--agent-id", "agent-a", "--json")
    assert bad["is_error"] and bad["json"]["exit_class"] == "usage", bad
    # ctl's line, in the tool's words: the argument, not the command-line flag
    assert cli_event.stderr.decode().strip().splitlines()[-1] == \
        "--reason must be one of: blocked-user-input, question, permission"
    assert bad["json"]["message"] == \
        "typed.reason must be one of: blocked-user-input, question, permission"
    cli_audit = daemon.ctl("batch-audit", "--batch-id", "b1", "--json")
    assert audit["is_error"] and audit["json"]["exit_class"] == "unknown", audit
    assert audit["json"]["output"] == json.loads(cli_audit.stdout)
    assert not doctor["is_error"], doctor
    assert doctor["json"] == json.loads(daemon.ctl("doctor", "--json").stdout)


async def test_an_unconfigured_server_takes_agent_id_per_call(daemon: Daemon) -> None:
    async with server(daemon, None) as anyone:
        schema = {t.name: t.input_schema for t in (await anyone.list_tools()).tools}["claim"]
        missing = await anyone.call_tool("claim", {"repo": "o/r", "target": "3"})
        claimed = result(await anyone.call_tool("claim", {"repo": "o/r", "target": "3",
                                                          "agent_id": "agent-z"}))
    assert "agent_id" in schema["required"]
    assert_usage(missing, "agent_id")
    assert not claimed["is_error"] and claimed["json"]["claim"]["agent_id"] == "agent-z"


async def test_the_first_call_starts_the_daemon_like_ctl(short_dir: Path) -> None:
    (short_dir / "auto").mkdir()
    d = make_daemon(short_dir / "auto")
    try:
        async with server(d, "agent-a", AGENT_COORD_NO_AUTOSTART="") as a:
            first = result(await a.call_tool("status", {}))
        assert not first["is_error"], first
        assert any(t.startswith("agentcoordctl: started agentcoordd") for t in first["texts"])
    finally:
        d.ctl("daemon", "stop")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _lane(d: Daemon, agent_id: str) -> dict[str, Any]:
    rows = json.loads(d.ctl("lanes", "--json").stdout)["lanes"]
    return next(row for row in rows if row["agent_id"] == agent_id)


@pytest.mark.parametrize("arguments", [
    {"repo": "o/r", "target": "9", "keep_alive": {}},
    {"repo": "o/r", "target": "9"},  # a plain claim is bound to the host too (issue 40)
], ids=["keep-alive", "plain"])
def test_a_claim_is_released_when_the_agent_host_exits(daemon: Daemon, arguments: dict) -> None:
    env = {**daemon.env(), "AGENT_COORD_AGENT_ID": "agent-k"}
    with open(daemon.base / "host.log", "a") as hostlog:
        host = subprocess.Popen([sys.executable, HOST, SERVER, json.dumps(arguments)], env=env,
                                stdout=subprocess.PIPE, stderr=hostlog, cwd=str(daemon.base))
    servers: list[int] = []
    try:
        assert host.stdout is not None
        with host.stdout:
            line = host.stdout.readline()
        claimed = json.loads(line)
        assert not claimed["is_error"], claimed
        assert claimed["structured"]["keep_alive"]["watch_pid"] == host.pid
        servers = _children(host.pid)
        assert _lane(daemon, "agent-k")["state"] == "active"

        host.send_signal(signal.SIGKILL)  # the agent host dies without a word
        host.wait(10)
        deadline = time.monotonic() + 10
        lane = _lane(daemon, "agent-k")
        while lane["state"] == "active" and time.monotonic() < deadline:
            time.sleep(0.1)
            lane = _lane(daemon, "agent-k")
        assert lane["state"] == "ended" and lane["end_reason"] == "watched_process_exited", lane
        # the claim is free in seconds, not after its 4 h lease
        path = daemon.root / "claims" / "o" / "r" / "9.json"
        while json.loads(path.read_text())["status"] != "released" and time.monotonic() < deadline:
            time.sleep(0.05)
        claim = json.loads(path.read_text())
        assert (claim["status"], claim["release_mode"]) == ("released", "holder_exited"), claim
        taken = daemon.ctl("claim", "--agent-id", "next", "--repo", "o/r", "--target", "9")
        assert taken.returncode == 0, taken.stderr
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        for pid in servers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


async def test_a_lane_closed_through_the_tools_passes_its_batch_audit(daemon: Daemon) -> None:
    manifest = daemon.base / "wave-9.json"
    manifest.write_text(json.dumps({
        "schema_version": 1, "batch_id": "wave-9", "repo": "acme/widgets",
        "lanes": [{"name": "parser", "owner": "worker-parser", "targets": ["311"]}]}))
    assert daemon.ctl("register-batch", "--file", str(manifest)).returncode == 0
    lane = {"repo": "acme/widgets", "target": "311"}
    async with server(daemon, "worker-parser", AGENT_COORD_MACHINE_ID="m5") as agent:
        before = result(await agent.call_tool("batch_audit", {"batch_id": "wave-9"}))
        claimed = result(await agent.call_tool("claim", {**lane, "batch_id": "wave-9"}))
        closed = result(await agent.call_tool("release", {**lane, "terminal": "done",
                                                          "pr_state": "merged"}))
        after = result(await agent.call_tool("batch_audit", {"batch_id": "wave-9"}))
    assert before["is_error"] and before["json"]["exit_class"] == "incomplete", before
    assert before["json"]["output"]["verdict"] == "incomplete"
    assert not claimed["is_error"] and not closed["is_error"], (claimed, closed)
    assert not after["is_error"] and after["json"]["verdict"] == "complete", after
    assert after["json"] == json.loads(daemon.ctl("batch-audit", "--batch-id", "wave-9",
                                                  "--json").stdout)
