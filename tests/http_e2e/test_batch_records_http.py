"""The batch's own records on the Worker, through two daemons (docs/batch-records.md):
usage from two agents and two models, a route, a blocker set on one machine and
resolved on the other, the completion report after the last closeout — read back
in `status --batch-id`; and gc archives a completed batch with its records."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from .conftest import err, out, record


def ctl_json(node: Any, *args: str, **env: str) -> dict[str, Any]:
    result = node.ctl(*args, "--json", **env)
    assert result.returncode == 0, (args, out(result), err(result))
    return json.loads(out(result))


@pytest.mark.timeout(600)  # sixteen ctl calls through wrangler on a shared machine
def test_usage_route_blocker_and_completion_on_the_worker(e2e_worker, node_factory, repo) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")
    batch = "rec-" + repo.split("/")[0]
    manifest = a.daemon.base / "batch.json"
    manifest.write_text(json.dumps({"batch_id": batch, "repo": repo, "merge_authority": "ask", "lanes": [
        {"name": "api", "owner": "agent-a", "targets": ["1"]},
        {"name": "ui", "owner": "agent-b", "targets": ["2"]}]}))
    assert a.ctl("register-batch", "--file", str(manifest)).returncode == 0
    ctl_json(a, "claim", "--agent-id", "agent-a", "--repo", repo, "--target", "1", "--batch-id", batch,
             "--route", "gpt-5.6/high", AGENT_COORD_MACHINE_ID="m-a")
    for node, lane, agent, target, model, metrics in (
            (a, "api", "agent-a", "1", "gpt-5.6", ("--input-tokens", "1000", "--output-tokens", "100",
                                                   "--cost", "1.5")),
            (b, "ui", "agent-b", "2", "claude-x", ("--input-tokens", "50", "--output-tokens", "5"))):
        ctl_json(node, "usage", "record", "--batch-id", batch, "--lane", lane, "--agent-id", agent,
                 "--repo", repo, "--target", target, "--model", model, *metrics)
    ctl_json(a, "batch", "block", "--batch-id", batch, "--message", "merge?", "--decision", "yes",
             "--decision", "no")
    blocked = ctl_json(b, "status", "--batch-id", batch)["batches"][0]
    assert blocked["blocker"] == {"message": "merge?", "decisions": ["yes", "no"]}
    ctl_json(b, "batch", "unblock", "--batch-id", batch, "--decision", "yes", AGENT_COORD_MACHINE_ID="m-b")
    for node, lane, agent, target in ((a, "api", "agent-a", "1"), (b, "ui", "agent-b", "2")):
        ctl_json(node, "record-event", "--batch-id", batch, "--type", "lane_closed", "--lane", lane,
                 "--agent-id", agent, "--repo", repo, "--target", target, "--terminal", "done",
                 AGENT_COORD_MACHINE_ID="m-a" if node is a else "m-b")

    shown = ctl_json(a, "status", "--batch-id", batch)["batches"][0]

    assert shown["merge_authority"] == "ask" and "blocker" not in shown
    assert (shown["blocker_resolution"]["decision"], shown["blocker_resolution"]["by"]["machine_id"]) == ("yes", "m-b")
    assert shown["usage_totals"]["tokens_by_model"] == {
        "gpt-5.6": {"input_tokens": 1000, "output_tokens": 100, "cost": 1.5},
        "claude-x": {"input_tokens": 50, "output_tokens": 5, "cost": None}}
    assert shown["usage_totals"]["batch_totals"] == {"input_tokens": 1050, "output_tokens": 105, "cost": 1.5}
    completion = shown["completion"]["completion"]
    assert (completion["tokensTotal"], completion["cost"]) == (1155, 1.5)
    assert [r["k"] for r in completion["receipts"]] == ["api", "ui"]
    stored = record(e2e_worker, f"batches/{batch}.json")
    assert stored is not None and stored["data"]["completion"] == shown["completion"]
    claim = record(e2e_worker, f"claims/{repo}/1.json")
    assert claim is not None and claim["data"]["route"] == "gpt-5.6/high"
    for family, data in (("usage", stored["data"]["usage"][0]), ("batch_completion", shown["completion"])):
        checked = a.daemon.ctl("validate", "--family", family, "-", input=json.dumps(data).encode())
        assert checked.returncode == 0, (family, out(checked), err(checked))


def test_gc_archives_a_completed_batch_with_its_records_on_the_worker(e2e_worker, node_factory, repo) -> None:
    batch = "recgc-" + repo.split("/")[0]
    old = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=40)).strftime("%Y-%m-%dT%H:%M:%SZ")
    usage = {"schema_version": 1, "workspace": "default", "repo": repo, "target": "1", "batch_id": batch,
             "lane_name": "api", "agent_id": "agent-a", "model": "m", "input_tokens": 3,
             "output_tokens": None, "cost": None, "currency": "USD", "reported_at": old}
    data = {"schema_version": 1, "batch_id": batch, "repo": repo, "status": "completed",
            "completed_at": old, "registered_at": old,
            "lanes": [{"name": "api", "owner": "agent-a", "targets": ["1"], "terminal": "done"}],
            "usage": [usage], "blocker_resolution": {"decision": "yes", "at": old}}
    resp = httpx.put(f"{e2e_worker.url}/v1/state/{quote(f'batches/{batch}.json', safe='')}",
                     json={"data": data}, timeout=10,
                     headers={"Authorization": f"Bearer {e2e_worker.tokens['ops']}", "If-None-Match": "*"})
    assert resp.status_code in (200, 201), resp.text
    ops = node_factory("ops", e2e_worker, "ops")

    done = ops.ctl("gc", "--execute", "--json")

    assert done.returncode == 0, err(done)
    assert record(e2e_worker, f"batches/{batch}.json") is None
    archived = record(e2e_worker, f"archive/batches/{batch}.json")
    assert archived is not None
    kept = archived["data"]["data"]
    assert (kept["usage"], kept["blocker_resolution"]) == ([usage], data["blocker_resolution"])
