"""The answer and feed loops through agentcoord-mcp: a request, its answer, waiting for
it, and the batch's events after a cursor — the same JSON as ctl's."""

from __future__ import annotations

import json

from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures
from integration.helpers import Daemon
from test_mcp_server import result, server

BATCH = "mcp-loops"


async def test_request_wait_answer_and_events_after_a_cursor(daemon: Daemon) -> None:
    async with server(daemon, "asker") as asker, server(daemon, "helper") as helper:
        asked = result(await asker.call_tool("record_event", {
            "batch_id": BATCH, "type": "help_requested", "lane": "parser",
            "message": "staging or prod?", "typed": {"reason": "question"}}))
        assert not asked["is_error"], asked
        request_id = asked["json"]["event"]["event_id"]

        pending = result(await asker.call_tool("wait_answer", {
            "batch_id": BATCH, "event_id": request_id, "wait_seconds": 0.5}))
        assert pending["is_error"] and pending["json"]["exit_class"] == "timed_out", pending
        assert pending["json"]["output"]["met"] is False
        assert pending["json"]["message"].startswith("wait: timed out after 0.5s ("), pending

        listed = result(await helper.call_tool("events", {"batch_id": BATCH}))
        assert not listed["is_error"], listed
        rows = listed["json"]["events"]
        assert [r["event_id"] for r in rows] == [request_id] and rows[0]["cursor"]
        cli = daemon.ctl("events", "--batch-id", BATCH, "--json")
        assert [json.loads(line) for line in cli.stdout.decode().splitlines()] == rows

        wrong = result(await helper.call_tool("answer", {
            "batch_id": BATCH, "to_event": "not-an-event", "message": "?"}))
        assert wrong["is_error"] and wrong["json"]["exit_class"] == "usage", wrong

        answered = result(await helper.call_tool("answer", {
            "batch_id": BATCH, "to_event": request_id, "message": "use staging",
            "decision": "proceed"}))
        assert not answered["is_error"], answered
        assert answered["json"]["event"]["type"] == "help_answered"
        assert answered["json"]["event"]["agent_id"] == "helper"

        got = result(await asker.call_tool("wait_answer", {
            "batch_id": BATCH, "event_id": request_id, "wait_seconds": 10}))
        assert not got["is_error"], got
        assert got["json"]["met"] is True
        assert got["json"]["answer"]["message"] == "use staging"
        assert got["json"]["answer"]["reply_to"] == request_id

        since = result(await helper.call_tool("events", {"batch_id": BATCH,
                                                         "after": rows[0]["cursor"]}))
        assert [r["type"] for r in since["json"]["events"]] == ["help_answered"]


POOL = {"batch_id": "mcp-pool", "repo": "acme/widgets", "lanes": [
    {"name": "api", "owner": "pool", "pool": True, "targets": ["1"]},
    {"name": "ui", "owner": "pool", "pool": True, "targets": ["2"], "depends_on": "mcp-pool:api"},
]}


async def test_ready_and_claim_next_through_the_tools(daemon: Daemon) -> None:
    manifest = daemon.base / "pool.json"
    manifest.write_text(json.dumps(POOL))
    assert daemon.ctl("register-batch", "--file", str(manifest)).returncode == 0
    async with server(daemon, "w1") as w1, server(daemon, "w2") as w2:
        listed = result(await w1.call_tool("ready", {"batch_id": "mcp-pool"}))
        assert not listed["is_error"], listed
        cli = daemon.ctl("ready", "--batch-id", "mcp-pool", "--agent-id", "w1", "--json")
        assert listed["json"] == json.loads(cli.stdout)  # the same JSON as ctl's
        assert listed["json"]["ready"] == ["api"]

        took = result(await w1.call_tool("claim_next", {"batch_id": "mcp-pool"}))
        assert not took["is_error"], took
        assert took["json"]["lane"] == "api" and took["json"]["claim"]["agent_id"] == "w1"

        refused = result(await w2.call_tool("claim_next", {"batch_id": "mcp-pool"}))
        assert refused["is_error"] and refused["json"]["exit_class"] == "refused", refused
        assert refused["json"]["message"].startswith(
            "CLAIM_REFUSED: no ready lane in batch mcp-pool (")
