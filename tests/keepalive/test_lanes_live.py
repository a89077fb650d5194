"""Keep-alive lanes against a real agentcoordd with TTLs of seconds."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import time
from typing import Any

from agentcoordd import protocol as p
from agentcoordd.model.timefmt import parse_ts
from integration.helpers import Daemon, local_request

from .support import (
    ctl, events, heartbeat, heartbeat_raw, lane, lanes, state_of, wait_until,
)


def test_three_keepalive_lanes_stay_live_for_ten_ttls_without_ctl_calls(daemon: Daemon) -> None:
    # 3 s: stamps are whole seconds, so a beat can be good for only ttl - 1 s; with renewal
    # every ttl/3 that leaves a second of slack for a loaded CI machine (2 s left 0.3 s).
    ttl = 3
    agents = ["lane-a", "lane-b", "lane-c"]
    for agent in agents:
        result = ctl(daemon, "heartbeat", "--agent-id", agent, "--ttl", str(ttl), "--keep-alive")
        assert result.returncode == 0, result.stderr
        assert b"keep-alive: agentcoordd renews" in result.stderr
    deadline = time.time() + 10 * ttl
    samples = 0
    while time.time() < deadline:
        for agent in agents:
            assert state_of(heartbeat(daemon, agent)) == "live", heartbeat(daemon, agent)
        samples += 1
        time.sleep(0.2)
    assert samples > 50
    rows = lanes(daemon)
    assert {r["agent_id"]: r["state"] for r in rows} == dict.fromkeys(agents, "active")
    assert all(r["last_error"] is None and r["last_success"] for r in rows)


def test_killing_the_watched_process_ends_renewal_then_the_heartbeat_goes_stale_and_dead(
    daemon: Daemon,
) -> None:
    ttl = 1
    watched = subprocess.Popen(["sleep", "60"])
    try:
        result = ctl(daemon, "heartbeat", "--agent-id", "watcher", "--ttl", str(ttl), "--keep-alive",
                     "--watch-pid", str(watched.pid))
        assert result.returncode == 0, result.stderr
        time.sleep(1.2)
        assert lane(daemon, "watcher")["state"] == "active"
    finally:
        watched.kill()
        watched.wait()
    killed = time.monotonic()
    row = wait_until(lambda: (r := lane(daemon, "watcher")) and r["state"] == "ended" and r, 3.0)
    assert time.monotonic() - killed < 2.0
    assert row["end_reason"] == "watched_process_exited"
    last = heartbeat_raw(daemon, "watcher")
    record = json.loads(last)
    updated = parse_ts(record["updated_at"]).timestamp()
    expires = parse_ts(record["expires_at"]).timestamp()
    # stale from expires_at, dead from updated_at + 4 * ttl — and never renewed again
    wait_until(lambda: time.time() >= expires + 0.2, 5.0)
    assert state_of(record) == "stale"
    assert heartbeat_raw(daemon, "watcher") == last
    wait_until(lambda: time.time() >= updated + 4 * ttl + 0.2, 8.0)
    assert state_of(heartbeat(daemon, "watcher")) == "dead"
    assert heartbeat_raw(daemon, "watcher") == last


def test_restarting_the_daemon_resumes_lanes_and_ends_those_whose_process_is_gone(
    daemon: Daemon,
) -> None:
    survivor = subprocess.Popen(["sleep", "60"])
    goner = subprocess.Popen(["sleep", "60"])
    try:
        for agent, proc in (("stays", survivor), ("goes", goner)):
            result = ctl(daemon, "heartbeat", "--agent-id", agent, "--ttl", "2", "--keep-alive",
                         "--batch-id", "b-restart", "--watch-pid", str(proc.pid))
            assert result.returncode == 0, result.stderr
        assert daemon.stop() == 0
        goner.kill()
        goner.wait()
        before = heartbeat(daemon, "stays")["updated_at"]
        time.sleep(1.1)
        daemon.start()
        wait_until(lambda: heartbeat(daemon, "stays")["updated_at"] != before, 3.0)
        rows = {r["agent_id"]: r for r in lanes(daemon)}
        assert rows["stays"]["state"] == "active" and rows["stays"]["watch_pid"] == survivor.pid
        # listed an hour with its end reason, as every lane that ends by itself
        assert (rows["goes"]["state"], rows["goes"]["end_reason"]) == ("ended", "watched_process_exited")
        ended = wait_until(lambda: [e for e in events(daemon, "b-restart")
                                    if e["type"] == "lane.keepalive_ended"], 3.0)
        assert [(e["agent_id"], e["reason"]) for e in ended] == [("goes", "watched_process_exited")]
    finally:
        survivor.kill()
        goner.kill()
        survivor.wait()
        goner.wait()


def test_a_phase_the_agent_writes_while_renewals_run_is_never_overwritten(daemon: Daemon) -> None:
    result = ctl(daemon, "heartbeat", "--agent-id", "writer", "--ttl", "2", "--keep-alive",
                 "--renew-every", "0.05")
    assert result.returncode == 0, result.stderr
    rng = random.Random(5)
    statuses = ["in_progress", "blocked", "waiting_on_checks_or_review"]
    with daemon.raw() as raw:
        raw.hello()
        for step in range(40):
            phase, status = f"phase-{step}", rng.choice(statuses)
            response = raw.call(local_request(daemon, p.Heartbeat(
                agent_id="writer", ttl=2, status=status, meta=p.Metadata(phase=phase))))
            assert response.exit_code == 0, response.error
            time.sleep(rng.uniform(0.0, 0.12))
            record = heartbeat(daemon, "writer")
            assert (record["phase"], record["status"]) == (phase, status)
    assert lane(daemon, "writer")["state"] == "active"
    assert lane(daemon, "writer")["last_error"] is None


def _claim_record(d: Daemon) -> dict[str, Any]:
    return json.loads((d.root / "claims" / "acme" / "widgets" / "7.json").read_text())


def test_a_takeover_fences_the_old_lane_and_the_old_agent_is_warned(daemon: Daemon) -> None:
    result = ctl(daemon, "claim", "--agent-id", "old", "--repo", "acme/widgets", "--target", "7",
                 "--keep-alive", "--heartbeat-ttl", "2", "--renew-every", "0.2")
    assert result.returncode == 0, result.stderr
    assert heartbeat(daemon, "old")["status"] == "in_progress"
    # Another machine (same state root) takes the claim over.
    path = daemon.root / "claims" / "acme" / "widgets" / "7.json"
    record = _claim_record(daemon)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    record.update(agent_id="new", claimed_at=now, updated_at=now)
    tmp = path.with_name("7.json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    row = wait_until(lambda: (r := lane(daemon, "old")) and r["state"] == "fenced" and r, 3.0)
    assert row["new_holder"] == "new"
    frozen = heartbeat_raw(daemon, "old")
    time.sleep(0.6)
    assert heartbeat_raw(daemon, "old") == frozen  # no renewal after the fence
    status = ctl(daemon, "heartbeat", "--agent-id", "old", "--status", "blocked")
    assert b"fenced" in status.stderr and b"held by new" in status.stderr


def test_fencing_under_a_stalled_daemon(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory("stalled")
    d.start()
    other: Daemon = daemon_factory("other")
    other.root = d.root  # a second machine on the same state root
    other.start()
    ttl = 1
    result = ctl(d, "claim", "--agent-id", "old", "--repo", "acme/widgets", "--target", "7",
                 "--keep-alive", "--heartbeat-ttl", str(ttl))
    assert result.returncode == 0, result.stderr
    assert d.proc is not None
    # Freeze it right after a renewal, so none is half done.
    first = heartbeat_raw(d, "old")
    wait_until(lambda: heartbeat_raw(d, "old") != first, 3.0, interval=0.005)
    d.proc.send_signal(signal.SIGSTOP)
    try:
        stalled_at = heartbeat(d, "old")
        dead_at = parse_ts(stalled_at["updated_at"]).timestamp() + 4 * ttl
        wait_until(lambda: time.time() > dead_at + 0.5, 4 * ttl + 3)
        taken = ctl(other, "claim", "--agent-id", "new", "--repo", "acme/widgets", "--target", "7")
        assert taken.returncode == 0, taken.stderr
        frozen_beat, frozen_claim = heartbeat_raw(d, "old"), _claim_record(d)
    finally:
        d.proc.send_signal(signal.SIGCONT)
    row = wait_until(lambda: (r := lane(d, "old")) and r["state"] == "fenced" and r, 3.0)
    assert row["new_holder"] == "new"
    time.sleep(0.5)
    assert heartbeat_raw(d, "old") == frozen_beat
    assert _claim_record(d) == frozen_claim and frozen_claim["agent_id"] == "new"
    listing = ctl(d, "lanes")
    assert b"fenced (by new)" in listing.stdout
    again = ctl(d, "claim", "--agent-id", "old", "--repo", "acme/widgets", "--target", "7")
    assert again.returncode == 3
    assert b"keep-alive lane of old was fenced" in again.stderr and b"held by new" in again.stderr


def test_release_and_terminal_status_end_renewal_with_an_event(daemon: Daemon) -> None:
    for agent, target in (("rel", "1"), ("term", "2")):
        result = ctl(daemon, "claim", "--agent-id", agent, "--repo", "acme/widgets", "--target",
                     target, "--batch-id", "b-end", "--keep-alive", "--heartbeat-ttl", "5")
        assert result.returncode == 0, result.stderr
    assert ctl(daemon, "release", "--agent-id", "rel", "--repo", "acme/widgets",
               "--target", "1").returncode == 0
    assert ctl(daemon, "heartbeat", "--agent-id", "term", "--status", "done").returncode == 0
    states = {r["agent_id"]: (r["state"], r["end_reason"]) for r in lanes(daemon)}
    assert states == {"rel": ("ended", "released"), "term": ("ended", "terminal")}
    def ended_events() -> list[tuple[str, str]] | None:  # both are written after the replies
        found = sorted((e["agent_id"], e["reason"]) for e in events(daemon, "b-end")
                       if e["type"] == "lane.keepalive_ended")
        return found if len(found) >= 2 else None

    ended = wait_until(ended_events, 3.0)
    assert ended == [("rel", "released"), ("term", "terminal")]
    stop = ctl(daemon, "lanes", "stop", "--agent-id", "rel")
    assert stop.returncode == 0 and lane(daemon, "rel") is None
    assert ctl(daemon, "lanes", "stop", "--agent-id", "nobody").returncode == 1


def test_nothing_the_daemon_persists_contains_a_token(daemon: Daemon) -> None:
    secret = "tok-keepalive-secret-41"
    result = ctl(daemon, "heartbeat", "--agent-id", "tokened", "--ttl", "5", "--keep-alive",
                 AGENT_COORD_API_TOKEN=secret, AGENT_COORD_ETCD_PASSWORD=secret)
    assert result.returncode == 0, result.stderr
    assert daemon.stop() == 0
    files = [f for f in daemon.state_dir.rglob("*") if f.is_file()]
    assert any(f.name == "lanes.json" for f in files)
    for f in files:
        assert secret.encode() not in f.read_bytes(), f
    assert (daemon.state_dir / "lanes.json").stat().st_mode & 0o777 == 0o600


def test_keepalive_flags_without_keep_alive_are_a_usage_error(daemon: Daemon) -> None:
    result = ctl(daemon, "heartbeat", "--agent-id", "x", "--renew-every", "3")
    assert result.returncode == 1 and b"--renew-every needs --keep-alive" in result.stderr
    bad = ctl(daemon, "heartbeat", "--agent-id", "x", "--ttl", "3", "--keep-alive",
              "--renew-every", "5")
    assert bad.returncode == 1 and b"must be shorter than the heartbeat TTL" in bad.stderr
    assert not (daemon.root / "heartbeats" / "x.json").exists()


def test_watch_pid_auto_without_an_agent_host_says_it_relies_on_the_idle_timeout(
    daemon: Daemon,
) -> None:
    result = ctl(daemon, "heartbeat", "--agent-id", "auto", "--ttl", "5", "--keep-alive",
                 "--watch-pid", "auto", "--idle-timeout", "60")
    assert result.returncode == 0
    assert b"no agent host process (no-such-agent-host)" in result.stderr
    assert b"idle timeout (60s)" in result.stderr
    assert lane(daemon, "auto")["watch_pid"] is None


def test_the_end_event_of_a_lane_claimed_by_target_names_the_lane(daemon: Daemon) -> None:
    """A keep-alive claim made with --repo/--target (not claim --next) still ends with an
    event that names its lane, so `events --lane` shows it (issue 44)."""
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps({"batch_id": "b-end", "repo": "acme/w", "lanes": [
        {"name": "api", "owner": "w-api", "targets": ["7"]}]}))
    assert ctl(daemon, "register-batch", "--file", str(manifest)).returncode == 0
    watched = subprocess.Popen(["sleep", "60"])
    try:
        result = ctl(daemon, "claim", "--agent-id", "w-api", "--repo", "acme/w", "--target", "7",
                     "--batch-id", "b-end", "--ttl", "30", "--keep-alive", "--watch-pid", str(watched.pid))
        assert result.returncode == 0, result.stderr
    finally:
        watched.kill()
        watched.wait()
    ended = wait_until(lambda: [e for e in events(daemon, "b-end")
                                if e["type"] == "lane.keepalive_ended"], 5.0)
    assert [(e["lane"], e["reason"]) for e in ended] == [("api", "watched_process_exited")]
    listed = ctl(daemon, "events", "--batch-id", "b-end", "--lane", "api", "--json")
    types = [json.loads(line)["type"] for line in listed.stdout.decode().splitlines()]
    assert "lane.keepalive_ended" in types and "claim.released" in types
