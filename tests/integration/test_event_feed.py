"""`events [--follow]` on a local root through a real daemon: order, cursors, filters,
resume across a daemon restart, one shared source for 100 followers, hostile cursors."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest

from agentcoordd import protocol as p

from .feed_helpers import FollowProcess, ids
from .helpers import Daemon, PYTHON, RawClient, local_request


def record(d: Daemon, batch: str, kind: str, lane: str = "l1", message: str = "m") -> str:
    result = d.ctl("record-event", "--batch-id", batch, "--type", kind, "--lane", lane,
                   "--message", message, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["event"]["event_id"]


def listing(d: Daemon, batch: str, *args: str) -> list[dict[str, Any]]:
    result = d.ctl("events", "--batch-id", batch, "--json", *args)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def follow(d: Daemon, batch: str, *args: str) -> FollowProcess:
    return FollowProcess(["--batch-id", batch, *args], d.env(), str(d.base))


def feed_sources(d: Daemon) -> list[dict[str, Any]]:
    result = d.ctl("daemon", "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["feed"]["sources"]


def test_events_are_listed_in_order_with_a_cursor_each_and_filtered(daemon: Daemon) -> None:
    written = [record(daemon, "b1", kind, lane) for kind, lane in
               [("note", "a"), ("done", "b"), ("note", "b"), ("blocked", "a")]]

    rows = listing(daemon, "b1")
    assert ids(rows) == written
    assert all(row["cursor"].startswith("c1.") for row in rows)
    assert ids(listing(daemon, "b1", "--type", "note")) == [written[0], written[2]]
    assert ids(listing(daemon, "b1", "--type", "note", "--type", "done")) == written[:3]
    assert ids(listing(daemon, "b1", "--lane", "a")) == [written[0], written[3]]
    assert ids(listing(daemon, "b1", "--after", rows[1]["cursor"])) == written[2:]
    assert listing(daemon, "b1", "--after", rows[-1]["cursor"]) == []
    assert ids(listing(daemon, "b1", "--after", "")) == written  # an unset $CURSOR: the start


def test_text_output_is_one_line_per_event_ending_in_its_cursor(daemon: Daemon) -> None:
    record(daemon, "b1", "note", message="hello")
    result = daemon.ctl("events", "--batch-id", "b1")
    lines = result.stdout.decode().splitlines()
    assert result.returncode == 0 and len(lines) == 1
    assert "note" in lines[0] and "hello" in lines[0] and lines[0].split()[-1].startswith("c1.")


def test_jsonl_history_is_merged_in_order(daemon: Daemon) -> None:
    first = record(daemon, "b1", "note")
    (daemon.root / "history").mkdir()
    (daemon.root / "history" / "runner.jsonl").write_text(
        json.dumps({"batch_id": "b1", "type": "lane.started", "at": "2020-01-01T00:00:00Z"}) + "\n"
        + json.dumps({"batch_id": "other", "type": "x", "at": "2020-01-01T00:00:00Z"}) + "\n")

    rows = listing(daemon, "b1")
    assert [row["type"] for row in rows] == ["lane.started", "note"]
    assert rows[0]["source"] == "jsonl" and rows[1]["event_id"] == first


def test_cursor_resumes_across_a_daemon_restart_with_nothing_lost_or_repeated(daemon: Daemon) -> None:
    before = [record(daemon, "b1", "note", message=str(i)) for i in range(6)]
    cursor = listing(daemon, "b1")[2]["cursor"]
    daemon.stop()
    daemon.start()
    after = [record(daemon, "b1", "note", message=str(i)) for i in range(6, 10)]

    resumed = listing(daemon, "b1", "--after", cursor)
    assert ids(resumed) == before[3:] + after


def test_a_follower_survives_a_daemon_restart_without_loss_or_repeat(daemon: Daemon) -> None:
    first = [record(daemon, "b1", "note") for _ in range(3)]
    follower = follow(daemon, "b1", "--until-type", "done", "--timeout", "60")
    seen = follower.take(3)
    live = [record(daemon, "b1", "note") for _ in range(2)]
    seen += follower.take(2)
    daemon.stop()
    gap = [record_direct(daemon, "b1") for _ in range(2)]  # written while no daemon runs
    daemon.start()
    last = [record(daemon, "b1", "note"), record(daemon, "b1", "done")]
    seen += follower.take(4)

    code, err = follower.finish()
    assert code == 0, err
    assert ids(seen) == first + live + gap + last
    assert "following again from the last cursor" in err


def record_direct(d: Daemon, batch: str) -> str:
    """An event file another tool wrote into the root (no daemon involved)."""
    import datetime as dt

    from agentcoordd.model.timefmt import format_ts, new_event_id

    now = dt.datetime.now(dt.timezone.utc)
    event_id = new_event_id(now)
    folder = d.root / "events" / batch
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{event_id}.json").write_text(json.dumps({
        "event_id": event_id, "batch_id": batch, "type": "note", "at": format_ts(now)}))
    return event_id


def test_a_late_event_with_an_earlier_at_is_delivered_once_marked_late(daemon: Daemon) -> None:
    record(daemon, "b1", "note")
    follower = follow(daemon, "b1", "--until-type", "done", "--timeout", "60")
    head = follower.take(1)
    late_id = "20000101T000000.000000Z-1a7e1a7e"  # a machine whose clock is far behind
    folder = daemon.root / "events" / "b1"
    (folder / f"{late_id}.json").write_text(json.dumps({
        "event_id": late_id, "batch_id": "b1", "type": "note", "at": "2000-01-01T00:00:00Z"}))
    late = follower.take(1)
    record(daemon, "b1", "done")
    tail = follower.take(1)

    assert follower.finish()[0] == 0
    assert ids(late) == [late_id] and late[0]["late"] is True
    # The cursor stays the high-water mark: resuming from it repeats nothing.
    assert late[0]["cursor"] == head[0]["cursor"]
    assert listing(daemon, "b1", "--after", tail[0]["cursor"]) == []


def test_an_event_of_the_same_second_after_a_reservation_id_is_not_late(daemon: Daemon) -> None:
    """`at` has one-second resolution: within it a lane_closed reservation id sorts after
    every time-sortable id, so what follows it in that second sorts before it — not late."""
    from agentcoordd.model import ids as model_ids

    record(daemon, "b1", "note")
    follower = follow(daemon, "b1", "--until-type", "done", "--timeout", "60")
    follower.take(1)
    at = "2030-01-01T00:00:00Z"
    folder = daemon.root / "events" / "b1"
    closed = model_ids.lane_closed_event_id("api")
    (folder / f"{closed}.json").write_text(json.dumps({
        "event_id": closed, "batch_id": "b1", "type": "lane_closed", "lane": "api", "at": at}))
    first = follower.take(1)
    after = "20300101T000000.500000Z-0a0a0a0a"  # written half a second later
    (folder / f"{after}.json").write_text(json.dumps({
        "event_id": after, "batch_id": "b1", "type": "note", "at": at}))
    second = follower.take(1)
    record(daemon, "b1", "done")
    follower.take(1)

    assert follower.finish()[0] == 0
    assert ids(first + second) == [closed, after]
    assert "late" not in first[0] and "late" not in second[0]


def test_follow_ends_with_exit_0_at_until_type_and_prints_it_last(daemon: Daemon) -> None:
    follower = follow(daemon, "b1", "--type", "note", "--until-type", "done", "--timeout", "60")
    time.sleep(0.5)
    record(daemon, "b1", "blocked")
    record(daemon, "b1", "note")
    record(daemon, "b1", "done", lane="l2")
    record(daemon, "b1", "note")

    rows = follower.take(2)
    code, err = follower.finish()
    assert code == 0, err
    assert [row["type"] for row in rows] == ["note", "done"]
    assert follower.lines.empty()


def test_until_type_with_lane_waits_for_that_lanes_event(daemon: Daemon) -> None:
    follower = follow(daemon, "b1", "--lane", "l2", "--until-type", "done", "--timeout", "60")
    record(daemon, "b1", "done", lane="l1")
    record(daemon, "b1", "done", lane="l2")
    rows = follower.take(1)
    assert follower.finish()[0] == 0
    assert rows[0]["lane"] == "l2"


def test_follow_timeout_is_exit_2_with_one_line(daemon: Daemon) -> None:
    started = time.monotonic()
    result = daemon.ctl("events", "--batch-id", "b1", "--follow", "--until-type", "done",
                        "--timeout", "1")
    assert result.returncode == 2
    assert time.monotonic() - started < 10
    assert result.stderr.decode().strip() == "events: timed out after 1s (no done event)"


@pytest.mark.parametrize("cursor", ["garbage", "c1.!!!!", "c1." + "QQ" * 60_000,
                                    "c1.WyJhIl0", "c1.eyJhIjoxfQ"])
def test_hostile_cursors_are_exit_1_with_one_line(daemon: Daemon, cursor: str) -> None:
    for follow_flag in ((), ("--follow",)):
        result = daemon.ctl("events", "--batch-id", "b1", "--after", cursor, *follow_flag)
        assert result.returncode == 1
        lines = result.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("invalid --after cursor"), lines
    assert daemon.ctl("daemon", "status").returncode == 0


def test_until_type_and_timeout_need_follow(daemon: Daemon) -> None:
    result = daemon.ctl("events", "--batch-id", "b1", "--until-type", "done")
    assert result.returncode == 1
    assert result.stderr.decode().strip() == "--until-type and --timeout need --follow"


def test_a_follower_whose_stdout_closes_ends_cleanly(daemon: Daemon) -> None:
    for _ in range(3):
        record(daemon, "b1", "note")
    started = time.monotonic()
    result = subprocess.run(
        f"{PYTHON} -m agentcoordctl.cli events --batch-id b1 --follow --json | head -1; "
        "echo \"exit=${PIPESTATUS[0]}\"", shell=True, executable="/bin/bash",
        env=daemon.env(), capture_output=True, timeout=30)
    lines = result.stdout.decode().splitlines()
    assert lines[-1] == "exit=0", result.stderr
    assert len(lines) == 2 and json.loads(lines[0])["type"] == "note"
    assert b"Traceback" not in result.stderr and time.monotonic() - started < 10
    deadline = time.monotonic() + 10
    while feed_sources(daemon)[0]["followers"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert feed_sources(daemon)[0]["followers"] == 0


def _raw_follower(d: Daemon, batch: str) -> RawClient:
    client = RawClient(d.socket, timeout=30)
    client.hello()
    request = local_request(d, p.Events(batch_id=batch, follow=True, until_type="done"))
    request.timeout = 120.0
    client.send_frame(request)
    return client


def _events_until_done(client: RawClient) -> list[str]:
    got: list[str] = []
    while True:
        frame = client.recv()
        if isinstance(frame, p.Response):
            assert frame.exit_code == 0, frame.error
            return got
        if isinstance(frame.data, dict):
            got.extend(row["event_id"] for row in frame.data.get("events") or [])


def test_a_hundred_followers_of_one_batch_cost_one_read_per_tick(daemon: Daemon) -> None:
    record(daemon, "b1", "note")
    followers = [_raw_follower(daemon, "b1") for _ in range(100)]
    deadline = time.monotonic() + 30
    while (not feed_sources(daemon) or feed_sources(daemon)[0]["followers"] < 100) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    before = feed_sources(daemon)[0]
    written = []
    for kind in ("note", "note", "note", "done"):
        written.append(record(daemon, "b1", kind))
        time.sleep(0.3)

    received = [_events_until_done(client) for client in followers]
    for client in followers:
        client.close()
    after = feed_sources(daemon)[0]
    assert before["followers"] == 100
    assert all(got[-4:] == written and len(got) == 5 for got in received)
    reads = after["reads"] - before["reads"]
    ticks = after["ticks"] - before["ticks"]
    # One read per change notice at most (bursts fold into one), never one per follower.
    assert 4 <= reads <= ticks <= 3 * len(written), (reads, ticks)


def test_the_feed_source_is_shown_in_daemon_status(daemon: Daemon) -> None:
    record(daemon, "b1", "note")
    follower = follow(daemon, "b1", "--timeout", "30")
    follower.take(1)
    sources = feed_sources(daemon)
    follower.finish(kill=True)
    assert sources[0]["batch_id"] == "b1" and sources[0]["mechanism"] == "inotify"  # Linux
    assert sources[0]["followers"] == 1 and sources[0]["reads"] >= 1
    assert os.fspath(daemon.root) in sources[0]["backend"]


def test_the_dashboards_event_stream_resumes_after_last_event_id(daemon: Daemon) -> None:
    import httpx

    written = [record(daemon, "b1", "note") for _ in range(3)]
    first = listing(daemon, "b1")[0]["cursor"]
    shown = daemon.ctl("dashboard", "--json")
    assert shown.returncode == 0, shown.stderr
    url = json.loads(shown.stdout)["url"] + "api/feed?batch_id=b1"

    auth = daemon.dashboard_headers()
    got: list[str] = []
    with httpx.stream("GET", url, headers={"Last-Event-ID": first, **auth}, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line[6:])["event_id"])
            if len(got) == 2:
                break
    assert got == written[1:]
    assert httpx.get(url, headers={"Last-Event-ID": "garbage", **auth}, timeout=10).status_code == 400
    assert httpx.get(url, headers={"Host": "evil.example", **auth}, timeout=10).status_code == 403
    assert httpx.get(url, timeout=10).status_code == 401


def test_a_follower_of_a_hung_daemon_follows_again_once_it_answers(daemon: Daemon) -> None:
    import signal

    first = record(daemon, "b1", "note")
    follower = FollowProcess(["--batch-id", "b1", "--until-type", "done", "--timeout", "60"],
                             daemon.env(AGENT_COORD_TIMEOUT="2"), str(daemon.base))
    seen = follower.take(1)
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)  # alive but silent: no keepalive comes
    time.sleep(3.5)
    os.kill(daemon.proc.pid, signal.SIGCONT)
    done = record(daemon, "b1", "done")
    seen += follower.take(1)

    code, err = follower.finish()
    assert code == 0, err
    assert ids(seen) == [first, done]
    assert "agentcoordd sent nothing for 2s" in err and "following again" in err
