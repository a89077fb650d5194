"""Issue 44: a coordinator registers a batch and agents wait for its lanes, through
agentcoord-mcp alone (register_batch, wait_ready), against a real agentcoordd."""

from __future__ import annotations

import json
import re
import time

import anyio
import pytest

from agentcoordmcp import tools
from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures
from integration.helpers import Daemon
from test_mcp_server import result, server

BATCH = "wave-44"
MANIFEST = {"batch_id": BATCH, "repo": "acme/widgets", "lanes": [
    {"name": "api", "owner": "w1", "targets": ["41"]},
    {"name": "ui", "owner": "pool", "pool": True, "targets": ["42"], "depends_on": f"{BATCH}:api"},
]}
FLAG = re.compile(r"(?<![\w-])--[a-z]")


async def _register(d: Daemon) -> dict:
    async with server(d, None) as coordinator:
        return result(await coordinator.call_tool("register_batch", {"manifest": MANIFEST}))


async def _wait_ready(d: Daemon, agent_id: str, batch_id: str,
                      seconds: float) -> tuple[dict, float]:
    """One wait_ready call: its result and how long it took."""
    async with server(d, agent_id) as agent:
        started = time.monotonic()
        waited = result(await agent.call_tool("wait_ready", {"batch_id": batch_id,
                                                             "wait_seconds": seconds}))
        return waited, time.monotonic() - started


async def test_register_batch_writes_the_manifest_as_register_batch_does(daemon: Daemon) -> None:
    registered = await _register(daemon)
    assert not registered["is_error"], registered
    stored = json.loads((daemon.root / "batches" / f"{BATCH}.json").read_text())
    assert registered["json"]["batch_id"] == BATCH and registered["json"]["batch"] == stored
    assert [lane["name"] for lane in stored["lanes"]] == ["api", "ui"]
    ready = json.loads(daemon.ctl("ready", "--batch-id", BATCH, "--json").stdout)
    assert ready["ready"] == ["api"]


BAD_MANIFESTS = {
    "cycle": ({**MANIFEST, "lanes": [
        {"name": "a", "owner": "w1", "targets": ["1"], "depends_on": f"{BATCH}:b"},
        {"name": "b", "owner": "w1", "targets": ["2"], "depends_on": f"{BATCH}:a"}]}, None),
    "duplicate-lane": ({**MANIFEST, "lanes": [MANIFEST["lanes"][0]] * 2}, None),
    "no-owner": ({**MANIFEST, "lanes": [{"name": "a", "targets": ["1"]}]}, None),
    "no-lanes": ({**MANIFEST, "lanes": []}, None),
    "bad-target": ({**MANIFEST, "lanes": [{"name": "a", "owner": "w1", "targets": ["../x"]}]},
                   None),
    "another-batch-id": (MANIFEST, "wave-45"),
}


@pytest.mark.parametrize("name", list(BAD_MANIFESTS))
async def test_a_bad_manifest_is_refused_in_register_batch_words_and_nothing_is_written(
        daemon: Daemon, name: str) -> None:
    manifest, batch_id = BAD_MANIFESTS[name]
    path = daemon.base / "manifest.json"
    path.write_text(json.dumps(manifest))
    flags = ["--batch-id", batch_id] if batch_id else []
    cli = daemon.ctl("register-batch", "--file", str(path), *flags)
    arguments = {"manifest": manifest, **({"batch_id": batch_id} if batch_id else {})}
    async with server(daemon, None) as coordinator:
        refused = result(await coordinator.call_tool("register_batch", arguments))
    assert cli.returncode == 1
    assert refused["is_error"] and refused["json"]["exit_class"] == "usage", refused
    said = cli.stderr.decode().strip().splitlines()[-1]
    words = tools.argument_words(tools.BY_NAME["register_batch"])
    assert refused["json"]["message"] == tools.in_tool_words(said, words)
    assert not FLAG.search(refused["json"]["message"]), refused
    assert not (daemon.root / "batches" / f"{BATCH}.json").exists()


async def test_wait_ready_answers_at_once_when_a_lane_is_ready(daemon: Daemon) -> None:
    await _register(daemon)
    waited, took = await _wait_ready(daemon, "w1", BATCH, 60)
    assert took < 10
    assert not waited["is_error"], waited
    assert waited["json"]["met"] is True and waited["json"]["ready"]["lane"] == "api"
    assert waited["json"]["ready"]["agent_id"] == "w1"  # ready for this agent


async def test_wait_ready_answers_once_the_dependency_closes(daemon: Daemon) -> None:
    await _register(daemon)
    answered: dict = {}
    async with server(daemon, "w1") as owner, server(daemon, "w2") as pooled:
        async def wait() -> None:
            answered.update(result(await pooled.call_tool("wait_ready", {
                "batch_id": BATCH, "wait_seconds": 60})))
            answered["at"] = time.monotonic()

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.sleep(1.5)  # w2's only lane (ui) is blocked on api meanwhile
            assert answered == {}
            took = result(await owner.call_tool("claim_next", {"batch_id": BATCH}))
            assert not took["is_error"] and took["json"]["lane"] == "api", took
            closed_at = time.monotonic()
            closed = result(await owner.call_tool("release", {
                "repo": "acme/widgets", "target": "41", "terminal": "done",
                "pr_state": "merged"}))
            assert not closed["is_error"], closed
    assert not answered["is_error"], answered
    assert answered["json"]["met"] is True and answered["json"]["ready"]["lane"] == "ui"
    assert answered["at"] >= closed_at


async def test_wait_ready_times_out_within_its_bound(daemon: Daemon) -> None:
    await _register(daemon)
    waited, took = await _wait_ready(daemon, "w2", BATCH, 1)
    assert 1 <= took < 10
    assert waited["is_error"] and waited["json"]["exit_class"] == "timed_out", waited
    assert waited["json"]["output"] == {
        "condition": "until-ready", "met": False, "timed_out": True,
        "detail": f"no lane of {BATCH} ready for w2 (1 blocked, 0 held, 0 closed)"}
    assert waited["json"]["message"] == (
        f"wait: timed out after 1s (no lane of {BATCH} ready for w2 (1 blocked, 0 held, 0 closed))")


async def test_wait_ready_on_an_unknown_batch_ends_at_once_naming_it(daemon: Daemon) -> None:
    waited, took = await _wait_ready(daemon, "w2", "wave-4", 600)
    assert took < 10
    assert waited["is_error"] and waited["json"]["exit_class"] == "unknown", waited
    assert waited["json"]["message"] == "batch wave-4 is not registered (check batch_id)"
    assert waited["json"]["output"]["met"] is False


@pytest.mark.parametrize("tool, arguments, words", [
    ("wait_ready", {"batch_id": 7}, "invalid argument batch_id: Expected `str`, got `int`"),
    ("wait_ready", {"batch_id": "../x"}, "invalid batch"),
    ("wait_ready", {"batch_id": BATCH, "wait_seconds": "soon"}, "invalid argument wait_seconds"),
    ("wait_ready", {"batch": BATCH}, "unknown argument for wait_ready: batch"),
    ("register_batch", {"manifest": 5}, "batch manifest must be a JSON object"),
    ("register_batch", {"manifest": "{not json"}, "batch manifest JSON invalid"),
    ("register_batch", {"manifest": MANIFEST, "launch_prompt": "a\x00b"},
     "launch_prompt contains NUL"),
    ("record_event", {"batch_id": BATCH, "type": "help_requested"},
     "missing required typed.reason"),
    ("record_event", {"batch_id": BATCH, "type": "error", "typed": {"severity": "P9"}},
     "typed.category"),
    ("release", {"repo": "acme/widgets", "target": "41", "terminal": "finished"},
     "terminal must be one of: done, abandoned, superseded"),
])
async def test_bad_arguments_are_one_line_in_the_tools_words(daemon: Daemon, tool: str,
                                                             arguments: dict, words: str) -> None:
    async with server(daemon, "w1") as agent:
        got = result(await agent.call_tool(tool, arguments))
        alive = result(await agent.call_tool("status", {"batch_id": BATCH}))
    assert got["is_error"] and got["json"]["exit_class"] == "usage", got
    message = got["json"]["message"]
    assert words in message and "\n" not in message and "Traceback" not in message, message
    assert not FLAG.search(message), message
    assert not alive["is_error"], alive
