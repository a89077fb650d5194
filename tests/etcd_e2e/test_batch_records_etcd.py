"""The batch's own records through agentcoordd on a real etcd (docs/batch-records.md):
usage reports, a route, a blocker and its resolution, the completion report after the
last closeout — stored on the batch, read back in `status --batch-id`."""

from __future__ import annotations

import json
from typing import Any

from .conftest import EtcdDaemon

REPO = "acme/widgets"
MACHINE = {"AGENT_COORD_MACHINE_ID": "m1"}


def ok(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_usage_route_blocker_and_completion_on_etcd(on_etcd: EtcdDaemon) -> None:
    manifest = on_etcd.daemon.base / "batch.json"
    manifest.write_text(json.dumps({"batch_id": "b1", "repo": REPO, "lanes": [
        {"name": "api", "owner": "agent-a", "targets": ["1"], "route": {"model": "v/m", "effort": "low"}}]}))
    assert on_etcd.ctl("register-batch", "--file", str(manifest)).returncode == 0
    ok(on_etcd.ctl("usage", "record", "--batch-id", "b1", "--lane", "api", "--agent-id", "agent-a",
                   "--repo", REPO, "--target", "1", "--model", "m", "--output-tokens", "7", "--json"))
    ok(on_etcd.ctl("batch", "block", "--batch-id", "b1", "--message", "ok?", "--decision", "go", "--json"))
    ok(on_etcd.ctl("batch", "unblock", "--batch-id", "b1", "--decision", "go", "--json", env=MACHINE))
    ok(on_etcd.ctl("record-event", "--batch-id", "b1", "--type", "lane_closed", "--lane", "api",
                   "--agent-id", "agent-a", "--repo", REPO, "--target", "1", "--terminal", "done",
                   "--json", env=MACHINE))

    (batch,) = ok(on_etcd.ctl("status", "--batch-id", "b1", "--json"))["batches"]

    assert batch["lanes"][0]["route"] == "v/m/low"
    assert batch["usage_totals"]["batch_totals"] == {"input_tokens": None, "output_tokens": 7, "cost": None}
    assert batch["blocker_resolution"]["decision"] == "go" and "blocker" not in batch
    completion = batch["completion"]["completion"]
    assert (completion["tokensTotal"], completion["cost"], completion["usage"]) == (7, None, {"input": None, "output": 7})
    assert on_etcd.read("batches/b1.json")["completion"] == batch["completion"]
