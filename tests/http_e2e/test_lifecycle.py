"""The command lifecycle through the daemon on the HTTP backend."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from .conftest import err, out, record


def test_claim_writes_the_record_through_the_worker_with_this_machines_attribution(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    result = a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                   "--branch", "feat/1")
    assert result.returncode == 0, err(result)
    assert out(result).startswith(f"claimed {repo}#1 by a-codex until ")
    entry = record(e2e_worker, f"claims/{repo}/1.json")
    assert entry is not None
    assert entry["data"]["agent_id"] == "a-codex" and entry["data"]["branch"] == "feat/1"
    assert entry["updated_by"] == "m-a"


def test_second_machine_is_refused_with_exit_3_while_the_holder_is_live(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")
    assert a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "1").returncode == 0
    assert a.ctl("heartbeat", "--agent-id", "a-codex", "--repo", repo, "--target", "1").returncode == 0
    refused = b.ctl("claim", "--agent-id", "b-claude", "--repo", repo, "--target", "1")
    assert refused.returncode == 3
    assert err(refused).startswith(f"CLAIM_REFUSED: active claim for {repo}#1 held by a-codex")
    assert record(e2e_worker, f"claims/{repo}/1.json")["data"]["agent_id"] == "a-codex"


def test_takeover_is_allowed_once_the_holders_heartbeat_is_dead(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")
    a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "1")
    assert a.ctl("heartbeat", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                 "--ttl", "1").returncode == 0
    assert b.ctl("claim", "--agent-id", "b-claude", "--repo", repo, "--target", "1").returncode == 3
    time.sleep(4.2)  # dead after updated_at + 4 * ttl (second-resolution timestamps)
    took = b.ctl("claim", "--agent-id", "b-claude", "--repo", repo, "--target", "1")
    assert took.returncode == 0, err(took)
    entry = record(e2e_worker, f"claims/{repo}/1.json")
    assert entry["data"]["agent_id"] == "b-claude" and entry["updated_by"] == "m-b"


def test_heartbeat_renews_and_status_shows_the_live_holder(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "1")
    first = a.ctl("heartbeat", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                  "--phase", "implementing")
    assert first.returncode == 0 and out(first).startswith("heartbeat a-codex "), err(first)
    v1 = record(e2e_worker, "heartbeats/a-codex.json")["version"]
    assert a.ctl("heartbeat", "--agent-id", "a-codex", "--repo", repo, "--target", "1").returncode == 0
    assert record(e2e_worker, "heartbeats/a-codex.json")["version"] > v1
    status = a.ctl("status", "--repo", repo, "--target", "1", "--json")
    assert status.returncode == 0, err(status)
    payload = json.loads(out(status))
    assert payload["scope"] == {"kind": "target", "repo": repo, "target": "1"}
    text = a.ctl("status", "--repo", repo, "--target", "1")
    assert f"- {repo}#1 active a-codex" in out(text)
    assert "- a-codex in_progress live" in out(text)


def test_release_lets_the_other_machine_claim(e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")
    a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "1")
    a.ctl("heartbeat", "--agent-id", "a-codex", "--repo", repo, "--target", "1")
    released = a.ctl("release", "--agent-id", "a-codex", "--repo", repo, "--target", "1")
    assert (released.returncode, out(released)) == (0, f"released {repo}#1 by a-codex\n")
    assert record(e2e_worker, f"claims/{repo}/1.json")["data"]["status"] == "released"
    assert b.ctl("claim", "--agent-id", "b-claude", "--repo", repo, "--target", "1").returncode == 0


def test_terminal_closeout_then_batch_audit_is_complete(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    batch = f"b{uuid.uuid4().hex[:10]}"
    manifest = a.daemon.base / "batch.json"
    manifest.write_text(json.dumps({"batch_id": batch, "repo": repo, "lanes": [
        {"name": "backend", "owner": "a-codex", "targets": ["1"]}]}))
    assert out(a.ctl("register-batch", "--file", str(manifest))) == f"registered batch {batch}\n"
    assert a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                 "--batch-id", batch).returncode == 0
    open_audit = a.ctl("batch-audit", "--batch-id", batch, "--json")
    assert open_audit.returncode == 1, err(open_audit)
    assert json.loads(out(open_audit))["verdict"] == "incomplete"
    closing = a.ctl("release", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                    "--terminal", "done", "--pr-state", "merged",
                    "--evidence-url", "https://example.test/ci/1", AGENT_COORD_MACHINE_ID="m-a")
    assert (closing.returncode, out(closing)) == (0, f"released {repo}#1 by a-codex\n"), err(closing)
    again = a.ctl("release", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                  "--terminal", "done", "--pr-state", "merged",
                  "--evidence-url", "https://example.test/ci/1", AGENT_COORD_MACHINE_ID="m-a")
    assert (again.returncode, out(again)) == (0, f"lane already closed for {repo}#1\n")
    # a retry that omits the evidence is another closeout: refused (agent-coord's rule)
    partial = a.ctl("release", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                    "--terminal", "done", AGENT_COORD_MACHINE_ID="m-a")
    assert partial.returncode == 1 and "conflicting terminal closeout" in err(partial)
    audit = a.ctl("batch-audit", "--batch-id", batch, "--json")
    assert audit.returncode == 0, out(audit) + err(audit)
    assert json.loads(out(audit))["verdict"] == "complete"
    status = a.ctl("status", "--batch-id", batch, "--json")
    assert status.returncode == 0, err(status)
    assert json.loads(out(status))["scope"]["kind"] == "batch"


def _keep_alive_flag() -> str | None:
    import subprocess
    import sys

    help_text = subprocess.run([sys.executable, "-m", "agentcoordctl.cli", "heartbeat", "--help"],
                               capture_output=True, timeout=30).stdout.decode()
    return None if "--keep-alive" in help_text else (
        "agentcoordctl heartbeat has no --keep-alive flag yet (being wired into the daemon); "
        "unskip when it lands")


def test_keep_alive_lane_is_renewed_by_the_daemon_without_ctl_calls(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    if (reason := _keep_alive_flag()) is not None:
        pytest.skip(reason)
    a = node_factory("a", e2e_worker, "m-a")
    agent = f"k{uuid.uuid4().hex[:8]}"
    a.ctl("claim", "--agent-id", agent, "--repo", repo, "--target", "1")
    started = a.ctl("heartbeat", "--agent-id", agent, "--repo", repo, "--target", "1",
                    "--ttl", "3", "--phase", "implementing", "--keep-alive")
    assert started.returncode == 0, err(started)
    first = record(e2e_worker, f"heartbeats/{agent}.json")
    deadline = time.monotonic() + 6
    renewed = first
    while time.monotonic() < deadline and renewed["version"] < first["version"] + 2:
        time.sleep(0.25)
        renewed = record(e2e_worker, f"heartbeats/{agent}.json")
    assert renewed["version"] >= first["version"] + 2, "the daemon did not renew the lane"
    assert renewed["data"]["expires_at"] > first["data"]["expires_at"]
    assert renewed["data"].get("phase") == "implementing"  # renewal keeps what the agent wrote
    assert renewed["updated_by"] == "m-a"
    released = a.ctl("release", "--agent-id", agent, "--repo", repo, "--target", "1")
    assert released.returncode == 0, err(released)


def test_an_id_with_dot_dot_inside_is_refused_before_any_request(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    """`a..b` is outside agent-coord's id grammar on every backend: refused, nothing written."""
    a = node_factory("a", e2e_worker, "m-a")
    result = a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "a..b")
    assert result.returncode == 1, err(result)
    assert err(result).strip() == "invalid target: a..b (want an issue or PR number or id, e.g. 12)"
    listed = a.ctl("status", "--json")
    assert listed.returncode == 0, err(listed)
    assert "a..b" not in listed.stdout.decode()
