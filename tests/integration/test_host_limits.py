"""Host limits through real daemons on one local root (two machines): report, list,
clear, and their projection into ready / claim --next / wait --until-ready.

The contract keys a limit by (workspace, machine, quota_host, scope) and its replay
fixture (schema/state/v1/fixtures/replay/host-limit-reset-and-unmatched-lanes.json)
leaves a lane of another machine unblocked: so a limit reported on machine A skips
the matching lanes for A's agents — wherever they ask from — and not for B's."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

from .helpers import Daemon

REPO = "acme/widgets"
BATCH = {"batch_id": "q1", "repo": REPO, "lanes": [
    {"name": "east1", "owner": "pool", "pool": True, "targets": ["1"], "quota_host": "pool-east",
     "priority": 0},
    {"name": "east2", "owner": "pool", "pool": True, "targets": ["2"], "quota_host": "pool-east",
     "priority": 0},
    {"name": "plain", "owner": "pool", "pool": True, "targets": ["3"]},
]}
A = {"AGENT_COORD_MACHINE_ID": "machine-a"}
B = {"AGENT_COORD_MACHINE_ID": "machine-b"}


def _two_machines(daemon_factory: Any) -> tuple[Daemon, Daemon]:
    first, second = daemon_factory("a"), daemon_factory("b")
    second.root = first.root
    first.start()
    second.start()
    path = first.base / "q1.json"
    path.write_text(json.dumps(BATCH))
    assert first.ctl("register-batch", "--file", str(path)).returncode == 0
    return first, second


def _soon(seconds: int) -> str:
    moment = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_limit_skips_matching_lanes_for_its_machine_until_the_reset(daemon_factory: Any) -> None:
    on_a, on_b = _two_machines(daemon_factory)
    resets = _soon(8)
    reported = on_a.ctl("limit", "report", "--quota-host", "Pool-East", "--scope", "5h",
                        "--resets-at", resets, env=A)
    assert reported.returncode == 0, reported.stderr
    assert reported.stdout.decode() == f"host limit pool-east/5h on machine-a: active until {resets}\n"

    view = json.loads(on_b.ctl("ready", "--batch-id", "q1", "--json", env=A).stdout)
    rows = {row["name"]: row for row in view["lanes"]}
    assert [rows[n]["state"] for n in ("east1", "east2", "plain")] == ["blocked", "blocked", "ready"]
    assert rows["east1"]["blocked_on_limit"] == {
        "quota_host": "pool-east", "scope": "5h", "machine": "machine-a", "resets_at": resets,
        "path": "host_limits/default/machine-a/pool-east/5h.json"}
    text = on_a.ctl("ready", "--batch-id", "q1", env=A).stdout.decode()
    assert f"east1 owner pool (pool) targets 1 priority 0 - blocked on host limit pool-east/5h " \
           f"of machine-a until {resets}" in text

    taken = on_a.ctl("claim", "--next", "--batch-id", "q1", "--agent-id", "a1", "--json", env=A)
    assert json.loads(taken.stdout)["lane"] == "plain"
    refused = on_a.ctl("claim", "--next", "--batch-id", "q1", "--agent-id", "a2", env=A)
    assert refused.returncode == 3
    assert refused.stderr.decode().strip() == (
        "CLAIM_REFUSED: no ready lane in batch q1 (2 blocked, 1 held, 0 closed; 2 on host limit "
        f"pool-east/5h of machine-a until {resets})")

    other = on_b.ctl("claim", "--next", "--batch-id", "q1", "--agent-id", "b1", "--json", env=B)
    assert json.loads(other.stdout)["lane"] == "east1"  # machine-b's pool is not limited

    started = time.monotonic()
    woke = on_a.ctl("wait", "--until-ready", "--batch-id", "q1", "--agent-id", "a2",
                    "--timeout", "30", env=A, timeout=40)
    assert woke.returncode == 0, woke.stderr
    assert woke.stdout.decode() == "ready: lane east2 of q1 is ready for a2\n"
    assert time.monotonic() - started < 25
    assert dt.datetime.now(dt.timezone.utc) >= dt.datetime.fromisoformat(resets)
    again = on_a.ctl("claim", "--next", "--batch-id", "q1", "--agent-id", "a2", "--json", env=A)
    assert json.loads(again.stdout)["lane"] == "east2"


def test_clear_lifts_a_limit_with_an_unknown_reset(daemon: Daemon) -> None:
    path = daemon.base / "q1.json"
    path.write_text(json.dumps(BATCH))
    assert daemon.ctl("register-batch", "--file", str(path)).returncode == 0
    assert daemon.ctl("limit", "report", "--quota-host", "pool-east", "--scope", "weekly",
                      "--reset-unknown", "--source", "hook", env=A).returncode == 0
    view = json.loads(daemon.ctl("ready", "--batch-id", "q1", "--json", env=A).stdout)
    assert view["ready"] == ["plain"]
    listed = json.loads(daemon.ctl("limit", "list", "--json", env=A).stdout)["host_limits"]
    assert [(r["quota_host"], r["scope"], r["status"], r["resets_at"], r["effective"])
            for r in listed] == [("pool-east", "weekly", "active", None, True)]
    cleared = daemon.ctl("limit", "clear", "--quota-host", "pool-east", "--scope", "weekly", env=A)
    assert cleared.returncode == 0, cleared.stderr
    view = json.loads(daemon.ctl("ready", "--batch-id", "q1", "--json", env=A).stdout)
    assert view["ready"] == ["east1", "east2", "plain"]
    record = json.loads((daemon.root / "host_limits/default/machine-a/pool-east/weekly.json").read_text())
    assert record["status"] == "cleared" and record["cleared_at"] >= record["observed_at"]


def test_bad_limit_input_is_one_line_and_exit_1(daemon: Daemon) -> None:
    for args, line in (
        (["--quota-host", "p", "--scope", "s"], "missing required --resets-at TIME or --reset-unknown"),
        (["--quota-host", "https://p", "--scope", "s", "--reset-unknown"], "invalid quota host: 'https://p'"),
        (["--quota-host", "p", "--scope", "s", "--resets-at", "tomorrow"], "invalid --resets-at 'tomorrow'"),
        (["--quota-host", "p", "--scope", "s", "--resets-at", "2020-01-01T00:00:00Z"], "is not in the future"),
    ):
        done = daemon.ctl("limit", "report", *args, env=A)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and line in lines[0], lines
    unknown = daemon.ctl("limit", "clear", "--quota-host", "p", "--scope", "s", env=A)
    assert unknown.returncode == 1 and "no host limit recorded" in unknown.stderr.decode()
    # The CLI fuzzer's find: an invalid workspace was a daemon internal error (exit 2).
    for args in (["list"], ["report", "--quota-host", "p", "--scope", "s", "--reset-unknown"]):
        done = daemon.ctl("limit", *args, "--workspace", "", env=A)
        lines = done.stderr.decode().strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1, lines
        assert lines[0].startswith("invalid workspace:  (want letters"), lines


def test_status_projects_host_limits_in_full_and_batch_scope(daemon: Daemon) -> None:
    path = daemon.base / "q1.json"
    path.write_text(json.dumps(BATCH))
    assert daemon.ctl("register-batch", "--file", str(path)).returncode == 0
    assert "host_limits" not in json.loads(daemon.ctl("status", "--json").stdout)
    resets = _soon(3600)
    for quota in ("pool-east", "pool-north"):
        assert daemon.ctl("limit", "report", "--quota-host", quota, "--scope", "daily",
                          "--resets-at", resets, env=A).returncode == 0
    full = json.loads(daemon.ctl("status", "--json").stdout)
    assert [(r["quota_host"], r["effective"]) for r in full["host_limits"]] == [
        ("pool-east", True), ("pool-north", True)]
    batch = json.loads(daemon.ctl("status", "--batch-id", "q1", "--json").stdout)
    assert [r["quota_host"] for r in batch["host_limits"]] == ["pool-east"]  # its lanes' pools
    text = daemon.ctl("status", "--batch-id", "q1").stdout.decode()
    assert f"- pool-east/daily on machine-a: active until {resets}" in text.splitlines()


def test_health_lists_effective_limits_of_its_scope(daemon: Daemon) -> None:
    path = daemon.base / "q1.json"
    path.write_text(json.dumps(BATCH))
    assert daemon.ctl("register-batch", "--file", str(path)).returncode == 0
    assert "host_limits" not in json.loads(daemon.ctl("health", "--json").stdout)
    assert daemon.ctl("limit", "report", "--quota-host", "pool-east", "--scope", "daily",
                      "--reset-unknown", env=A).returncode == 0
    assert daemon.ctl("limit", "report", "--quota-host", "pool-north", "--scope", "daily",
                      "--reset-unknown", env=A).returncode == 0
    assert daemon.ctl("limit", "clear", "--quota-host", "pool-north", "--scope", "daily",
                      env=A).returncode == 0
    full = json.loads(daemon.ctl("health", "--json").stdout)
    assert [(r["quota_host"], r["status"]) for r in full["host_limits"]] == [("pool-east", "active")]
    batch = json.loads(daemon.ctl("health", "--batch-id", "q1", "--json").stdout)
    assert [r["quota_host"] for r in batch["host_limits"]] == ["pool-east"]


def test_token_limit_pause_on_a_lane_with_a_quota_host_offers_the_limit_report(daemon: Daemon) -> None:
    path = daemon.base / "q1.json"
    path.write_text(json.dumps(BATCH))
    assert daemon.ctl("register-batch", "--file", str(path)).returncode == 0
    paused = daemon.ctl("heartbeat", "--agent-id", "w1", "--repo", REPO, "--target", "1",
                        "--batch-id", "q1", "--status", "token_limit_pause", env=A)
    assert paused.returncode == 0, paused.stderr
    assert paused.stderr.decode().splitlines() == [
        "warning: lane east1 of q1 uses quota host pool-east: if its usage limit is reached, "
        "record it so no lane here is handed work until the reset: agentcoordctl limit report "
        "--quota-host pool-east --scope SCOPE (--resets-at TIME | --reset-unknown)"]
    assert not (daemon.root / "host_limits").exists()  # nothing recorded for the agent
    plain = daemon.ctl("heartbeat", "--agent-id", "w3", "--repo", REPO, "--target", "3",
                       "--batch-id", "q1", "--status", "token_limit_pause", env=A)
    assert plain.returncode == 0 and plain.stderr == b""  # its lane names no quota host
