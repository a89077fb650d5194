"""The answer round trip, the same on every backend: agent 1 asks for help and
blocks (`record-event --wait-answer`), agent 2 — another daemon on the same
backend — sees the request open in status, answers, and agent 1 prints it."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Agent:
    """How a test runs ctl as one agent: to completion, or in the background."""

    ctl: Callable[..., subprocess.CompletedProcess]
    spawn: Callable[..., subprocess.Popen]


def manifest(batch: str) -> dict[str, Any]:
    return {"batch_id": batch, "repo": "acme/widgets", "launch_prompt": "Claim #311.",
            "lanes": [{"name": "parser", "owner": "worker-1", "targets": ["311"]}]}


def register(agent: Agent, batch: str, where: Path) -> None:
    path = where / f"{batch}.json"
    path.write_text(json.dumps(manifest(batch)))
    result = agent.ctl("register-batch", "--file", str(path))
    assert result.returncode == 0, result.stderr.decode()


def open_requests(agent: Agent, batch: str) -> list[dict[str, Any]]:
    result = agent.ctl("status", "--batch-id", batch, "--json")
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout).get("open_requests", [])


def wait_open(agent: Agent, batch: str, count: int, timeout: float = 20) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        found = open_requests(agent, batch)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def round_trip(one: Agent, two: Agent, batch: str) -> float:
    """Run the round trip; the seconds from agent 2's answer to agent 1's exit."""
    asking = one.spawn("record-event", "--batch-id", batch, "--type", "help_requested",
                       "--reason", "question", "--lane", "parser", "--agent-id", "worker-1",
                       "--message", "which database?", "--wait-answer", "30")
    try:
        found = wait_open(two, batch, 1)
        assert [r["type"] for r in found] == ["help_requested"], found
        request = found[0]
        assert request["agent_id"] == "worker-1" and request["age_seconds"] >= 0
        text = two.ctl("status", "--batch-id", batch).stdout.decode()
        assert "open requests" in text and request["event_id"] in text

        answered = two.ctl("answer", "--batch-id", batch, "--to-event", request["event_id"],
                           "--message", "use staging", "--decision", "proceed",
                           "--agent-id", "lead", "--json")
        sent = time.monotonic()
        assert answered.returncode == 0, answered.stderr.decode()
        event = json.loads(answered.stdout)["event"]
        assert event["type"] == "help_answered" and event["reply_to"] == request["event_id"]
        stdout, stderr = asking.communicate(timeout=30)
        latency = time.monotonic() - sent
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait()
    assert asking.returncode == 0, stderr.decode()
    assert stdout.decode().splitlines() == [
        f"help_answered {event['event_id']} by lead at {event['at']}: use staging",
        "decision: proceed"]
    assert f"recorded event {batch} {request['event_id']}" in stderr.decode()
    assert open_requests(one, batch) == [] and open_requests(two, batch) == []
    return latency
