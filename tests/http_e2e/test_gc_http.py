"""gc through the daemon on the HTTP backend: archive, compaction, replay, scope refusal."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import quote

import httpx

from .conftest import err, out, record

NOW = dt.datetime.now(dt.timezone.utc)


def ts(days: float) -> str:
    return (NOW - dt.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def put(worker: Any, path: str, data: dict[str, Any]) -> None:
    resp = httpx.put(f"{worker.url}/v1/state/{quote(path, safe='')}", json={"data": data}, timeout=10,
                     headers={"Authorization": f"Bearer {worker.tokens['ops']}", "If-None-Match": "*"})
    assert resp.status_code in (200, 201), resp.text


def seed(worker: Any, repo: str, batch: str) -> None:
    put(worker, f"claims/{repo}/1.json", {
        "schema_version": 1, "repo": repo, "target": "1", "agent_id": "gc-a", "batch_id": batch,
        "status": "released", "claimed_at": ts(11), "updated_at": ts(10), "expires_at": ts(10),
        "released_by": "gc-a", "released_at": ts(10)})
    put(worker, f"claims/{repo}/2.json", {
        "schema_version": 1, "repo": repo, "target": "2", "agent_id": "gc-b", "status": "active",
        "claimed_at": ts(0.01), "updated_at": ts(0.01), "expires_at": ts(-0.1)})
    put(worker, f"events/{batch}/e1.json", {
        "schema_version": 1, "event_id": "e1", "batch_id": batch, "type": "claim.acquired",
        "agent_id": "gc-a", "repo": repo, "target": "1", "at": ts(11)})
    put(worker, f"events/{batch}/lane_closed-x.json", {
        "schema_version": 2, "event_id": "lane_closed-x", "batch_id": batch, "type": "lane_closed",
        "lane": "backend", "agent_id": "gc-a", "repo": repo, "target": "1", "terminal": "done",
        "workspace": "default", "closed_by": {"agent_id": "gc-a", "machine": "m1"}, "at": ts(10)})


def mine(plan: dict[str, Any], repo: str, batch: str) -> list[dict[str, Any]]:
    """This test's actions (the session's Worker is shared with other tests)."""
    return [a for a in plan["actions"]
            if repo in json.dumps(a) or f"events/{batch}/" in json.dumps(a)]


def test_gc_archives_and_compacts_on_the_worker_and_replays_as_a_no_op(e2e_worker, node_factory, repo) -> None:
    batch = "gc-" + repo.split("/")[0]
    seed(e2e_worker, repo, batch)
    ops = node_factory("ops", e2e_worker, "ops")
    dry = ops.ctl("gc", "--dry-run", "--json")
    assert dry.returncode == 0, err(dry)
    planned = mine(json.loads(out(dry)), repo, batch)
    assert sorted(a["reason"] for a in planned) == ["terminal_claim", "terminal_target_events"]
    assert record(e2e_worker, f"claims/{repo}/1.json") is not None  # dry-run wrote nothing

    done = ops.ctl("gc", "--execute", "--json")
    assert done.returncode == 0, err(done)
    assert record(e2e_worker, f"claims/{repo}/1.json") is None
    archived = record(e2e_worker, f"archive/claims/{repo}/1.json")
    assert archived is not None and archived["data"]["source_path"] == f"claims/{repo}/1.json"
    compact = [a for a in planned if a["action"] == "compact"][0]
    envelope = record(e2e_worker, compact["archive_path"])
    assert envelope is not None and len(envelope["data"]["source_paths"]) == 2
    assert record(e2e_worker, f"events/{batch}/e1.json") is None
    assert record(e2e_worker, f"claims/{repo}/2.json") is not None  # active claims stay hot

    again = ops.ctl("gc", "--dry-run", "--json")
    assert again.returncode == 0 and mine(json.loads(out(again)), repo, batch) == []


def test_gc_with_a_token_that_cannot_cover_archive_is_refused_exit_2(e2e_worker, node_factory) -> None:
    node = node_factory("scoped", e2e_worker, "m-a")
    result = node.ctl("gc", "--execute", "--prefix", "claims")
    assert result.returncode == 2, (out(result), err(result))
    assert "archive" in err(result)
