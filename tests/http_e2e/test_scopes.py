"""Machine-token scopes through the daemon: outside the scope is a clear exit 2
naming the path, a listing above it is filtered (and batch-audit says
UNKNOWN), an unknown or revoked token is exit 2 with the rotation hint."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from .conftest import PARTIAL_BATCH, err, out


def _put(worker: Any, path: str, data: Any) -> None:
    resp = httpx.put(f"{worker.url}/v1/state/{quote(path, safe='')}", json={"data": data},
                     headers={"Authorization": f"Bearer {worker.tokens['ops']}",
                              "If-None-Match": "*"}, timeout=10)
    assert resp.status_code in (201, 409), resp.text


def test_scoped_token_claims_inside_its_scope(e2e_worker: Any, node_factory: Any) -> None:
    w = node_factory("w", e2e_worker, "widgets-only")
    target = uuid.uuid4().hex[:10]
    result = w.ctl("claim", "--agent-id", "w-codex", "--repo", "acme/widgets", "--target", target)
    assert result.returncode == 0, err(result)


def test_claim_outside_the_scope_is_exit_2_naming_the_path(e2e_worker: Any, node_factory: Any) -> None:
    w = node_factory("w", e2e_worker, "widgets-only")
    result = w.ctl("claim", "--agent-id", "w-codex", "--repo", "acme/gadgets", "--target", "7")
    assert result.returncode == 2
    assert "claims/acme/gadgets/7.json" in err(result) and "no scope" in err(result)
    assert e2e_worker.url in err(result)
    assert "Traceback" not in err(result)


def test_heartbeat_outside_the_scope_is_exit_2_naming_the_path(e2e_worker: Any, node_factory: Any) -> None:
    w = node_factory("w", e2e_worker, "widgets-only")
    result = w.ctl("heartbeat", "--agent-id", "w-codex")
    assert result.returncode == 2
    assert "heartbeats/w-codex.json" in err(result) and "no scope" in err(result)


def test_status_above_the_scope_shows_only_covered_claims_marked_filtered(
        e2e_worker: Any, node_factory: Any) -> None:
    _put(e2e_worker, f"claims/acme/gadgets/{uuid.uuid4().hex[:8]}.json",
         {"repo": "acme/gadgets", "target": "x", "agent_id": "someone", "status": "active"})
    w = node_factory("w", e2e_worker, "widgets-only")
    w.ctl("claim", "--agent-id", "w-codex", "--repo", "acme/widgets", "--target", uuid.uuid4().hex[:8])
    result = w.ctl("status", "--json")
    payload = json.loads(out(result))
    assert "claims filtered by scoped token" in payload["section_notes"]["claims"]
    assert payload["claims"], "the covered claims are still listed"
    assert {row["repo"] for row in payload["claims"]} == {"acme/widgets"}
    # heartbeats/batches/events are outside the token: UNKNOWN, not empty
    assert result.returncode == 2
    assert "heartbeats" in payload["section_notes"]


def _seed_partial_batch(worker: Any) -> None:
    _put(worker, f"batches/{PARTIAL_BATCH}.json", {
        "schema_version": 1, "batch_id": PARTIAL_BATCH, "repo": "acme/widgets",
        "lanes": [{"name": "backend", "owner": "a-codex", "targets": ["1"]}]})
    for event in ("e-visible", "e-hidden"):
        _put(worker, f"events/{PARTIAL_BATCH}/{event}.json", {
            "schema_version": 1, "event_id": event, "batch_id": PARTIAL_BATCH,
            "type": "note", "agent_id": "a-codex", "at": "2026-06-13T00:00:00Z"})


def test_batch_audit_on_a_filtered_event_listing_is_unknown(e2e_worker: Any, node_factory: Any) -> None:
    _seed_partial_batch(e2e_worker)
    n = node_factory("n", e2e_worker, "audit-partial")
    result = n.ctl("batch-audit", "--batch-id", PARTIAL_BATCH, "--json")
    assert result.returncode == 2, out(result) + err(result)
    payload = json.loads(out(result))
    assert payload["verdict"] == "unknown"
    assert "filtered by a scoped token" in payload["reason"]


def test_batch_audit_with_no_read_scope_is_unknown(e2e_worker: Any, node_factory: Any) -> None:
    _seed_partial_batch(e2e_worker)
    w = node_factory("w", e2e_worker, "widgets-only")
    result = w.ctl("batch-audit", "--batch-id", PARTIAL_BATCH, "--json")
    assert result.returncode == 2
    assert json.loads(out(result))["verdict"] == "unknown"


def test_unknown_token_is_exit_2_with_the_rotation_hint_and_never_echoed(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    x = node_factory("x", e2e_worker, "m-a")
    x.token = "acd_" + "not-a-real-token-" + uuid.uuid4().hex
    for args in (("claim", "--agent-id", "x-codex", "--repo", repo, "--target", "1"),
                 ("status", "--repo", repo, "--target", "1")):
        result = x.ctl(*args)
        assert result.returncode == 2
        shown = err(result) + out(result)  # status reports it in its (UNKNOWN) report
        assert "unknown or revoked" in shown
        assert "agentcoordctl token provision MACHINE --rotate" in shown
        assert x.token not in err(result) + out(result)
        assert x.token not in x.daemon.log()


def test_revoked_token_is_exit_2_and_a_rotated_one_works(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    r = node_factory("r", e2e_worker, "to-revoke")
    assert r.ctl("claim", "--agent-id", "r-codex", "--repo", repo, "--target", "1").returncode == 0
    revoke = r.daemon.ctl("token", "revoke", "to-revoke", "--local",
                          "--persist-to", str(e2e_worker.persist_to), timeout=120)
    assert revoke.returncode == 0, err(revoke)
    refused = r.ctl("heartbeat", "--agent-id", "r-codex", "--repo", repo, "--target", "1")
    assert refused.returncode == 2 and "unknown or revoked" in err(refused)
    rotated = r.daemon.ctl("token", "provision", "to-revoke", "--rotate", "--local",
                           "--persist-to", str(e2e_worker.persist_to),
                           "--read-prefix", "claims", "--read-prefix", "heartbeats",
                           "--write-prefix", "claims", "--write-prefix", "heartbeats", timeout=120)
    assert rotated.returncode == 0, err(rotated)
    r.token = out(rotated).strip()
    again = r.ctl("heartbeat", "--agent-id", "r-codex", "--repo", repo, "--target", "1")
    assert again.returncode == 0, err(again)
