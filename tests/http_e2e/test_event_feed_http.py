"""`events --follow` on the HTTP backend (our Worker under wrangler): a listing poll."""

from __future__ import annotations

import json
import uuid
from typing import Any

from integration.feed_helpers import FollowProcess, ids

from .conftest import err


def test_follow_on_http_streams_new_events_and_ends_at_until_type(
        e2e_worker: Any, node_factory: Any) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")
    batch = f"feed-{uuid.uuid4().hex[:8]}"

    def record(node: Any, kind: str) -> str:
        result = node.ctl("record-event", "--batch-id", batch, "--type", kind, "--json")
        assert result.returncode == 0, err(result)
        return json.loads(result.stdout)["event"]["event_id"]

    first = record(a, "note")
    argv, env = b.argv()
    follower = FollowProcess(["--batch-id", batch, "--until-type", "done", "--timeout", "90"],
                             env, str(b.daemon.base))
    seen = follower.take(1, timeout=30)
    written = [record(a, "note"), record(a, "done")]  # another machine writes
    seen += follower.take(2, timeout=30)

    code, stderr = follower.finish()
    assert code == 0, stderr
    assert ids(seen) == [first, *written]
    status = json.loads(b.ctl("daemon", "status", "--json").stdout)
    assert [s["mechanism"] for s in status["feed"]["sources"]] == ["poll"]
    resumed = b.ctl("events", "--batch-id", batch, "--json", "--after", seen[0]["cursor"])
    assert [json.loads(line)["event_id"] for line in resumed.stdout.decode().splitlines()] == written
