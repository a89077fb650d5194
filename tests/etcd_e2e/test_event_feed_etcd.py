"""`events --follow` on a real etcd: the feed's source is a native watch on the prefix."""

from __future__ import annotations

import json
import time
from typing import Any

from integration.feed_helpers import FollowProcess, ids

from .conftest import NO_LOCAL, EtcdDaemon


def record(e: EtcdDaemon, kind: str, lane: str = "l1") -> str:
    result = e.ctl("record-event", "--batch-id", "b1", "--type", kind, "--lane", lane, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["event"]["event_id"]


def follow(e: EtcdDaemon, *args: str) -> FollowProcess:
    env = e.daemon.env(**e.caller_env)
    for name in NO_LOCAL:
        env.pop(name, None)
    return FollowProcess(["--batch-id", "b1", *args], env, str(e.daemon.base))


def sources(e: EtcdDaemon) -> list[dict[str, Any]]:
    return json.loads(e.ctl("daemon", "status", "--json").stdout)["feed"]["sources"]


def test_follow_on_etcd_streams_through_a_watch_and_resumes_from_a_cursor(on_etcd: EtcdDaemon) -> None:
    first = record(on_etcd, "note")
    follower = follow(on_etcd, "--until-type", "done", "--timeout", "60")
    seen = follower.take(1)
    written = [record(on_etcd, "note"), record(on_etcd, "blocked", "l2")]
    seen += follower.take(2)
    shown = sources(on_etcd)
    written.append(record(on_etcd, "done"))
    seen += follower.take(1)

    code, err = follower.finish()
    assert code == 0, err
    assert ids(seen) == [first, *written]
    assert shown[0]["mechanism"] == "watch" and shown[0]["followers"] == 1
    # Reads follow the watch's notices, not a timer.
    assert shown[0]["reads"] <= shown[0]["ticks"] <= 6
    resumed = on_etcd.ctl("events", "--batch-id", "b1", "--json", "--after", seen[0]["cursor"])
    assert [json.loads(line)["event_id"] for line in resumed.stdout.decode().splitlines()] \
        == written


def test_follow_on_etcd_with_a_type_filter_and_a_timeout(on_etcd: EtcdDaemon) -> None:
    follower = follow(on_etcd, "--type", "blocked", "--timeout", "3")
    time.sleep(0.5)
    record(on_etcd, "note")
    wanted = record(on_etcd, "blocked")
    rows = follower.take(1)
    code, err = follower.finish()
    assert ids(rows) == [wanted]
    assert code == 2 and "events: timed out after 3s" in err
