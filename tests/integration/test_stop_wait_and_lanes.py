"""Issue 11 leftovers through the real daemon: `wait --until-stop-requested` and the
`stop_requested` column of `lanes`."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from agentcoordd import protocol as p

from .helpers import PYTHON, Daemon, local_request


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


@pytest.fixture
def daemon(daemon: Daemon) -> Daemon:
    """A daemon whose root has batch b1 registered (a wait on an unknown batch ends at once)."""
    manifest = daemon.base / "b1.json"
    manifest.write_text(json.dumps({"batch_id": "b1", "lanes": [{"name": "a", "owner": "w-a", "targets": ["1"]}]}))
    assert daemon.ctl("register-batch", "--file", str(manifest)).returncode == 0
    return daemon


@pytest.mark.parametrize("until", [("--until-stop-requested",), ("--until-ready",),
                                   ("--until-unblocked", "--lane", "a"), ("--until-complete",),
                                   ("--until-answered", "--event-id", "20260101T000000.000000Z-0a0a0a0a")])
def test_every_wait_on_an_unknown_batch_ends_at_once_naming_it(daemon: Daemon, until: tuple) -> None:
    started = time.monotonic()
    result = daemon.ctl("wait", *until, "--batch-id", "b-typo", "--timeout", "600", "--json")
    assert result.returncode == 2, err(result)
    assert err(result) == "wait: batch b-typo is not registered (check --batch-id); nothing to wait for\n"
    payload = json.loads(out(result))
    assert (payload["condition"], payload["met"]) == (until[0].removeprefix("--"), False)
    assert time.monotonic() - started < 10


def test_wait_until_stop_requested_returns_at_once_when_the_batch_has_one(daemon: Daemon) -> None:
    daemon.ctl("batch", "stop", "--batch-id", "b1", "--message", "restart smaller")
    result = daemon.ctl("wait", "--until-stop-requested", "--batch-id", "b1", "--timeout", "10",
                        "--json")
    assert result.returncode == 0, err(result)
    payload = json.loads(out(result))
    assert payload["condition"] == "until-stop-requested" and payload["met"] is True
    assert payload["stop"]["stop_requested"] is True and payload["stop"]["message"] == "restart smaller"
    assert payload["waited_seconds"] < 5


def test_wait_until_stop_requested_wakes_when_a_stop_is_recorded(daemon: Daemon) -> None:
    waiter = subprocess.Popen(
        [PYTHON, "-m", "agentcoordctl.cli", "wait", "--until-stop-requested", "--batch-id", "b1",
         "--timeout", "20", "--interval", "0.1"],
        env=daemon.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(daemon.base))
    try:
        time.sleep(0.5)
        assert waiter.poll() is None
        daemon.ctl("batch", "stop", "--batch-id", "b1")
        stdout, stderr = waiter.communicate(timeout=15)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, stderr
    assert stdout.decode().startswith("stop-requested: batch b1 has a stop request")


def test_wait_until_stop_requested_times_out_with_exit_2(daemon: Daemon) -> None:
    started = time.monotonic()
    result = daemon.ctl("wait", "--until-stop-requested", "--batch-id", "b1", "--timeout", "1.5",
                        "--interval", "0.2", "--json")
    assert result.returncode == 2
    payload = json.loads(out(result))
    assert (payload["met"], payload["timed_out"]) == (False, True)
    assert "wait: timed out after 1.5s (no stop request for batch b1 yet)" in err(result)
    assert time.monotonic() - started < 6


def test_wait_until_stop_requested_usage_errors_are_exit_1(daemon: Daemon) -> None:
    assert daemon.ctl("wait", "--until-stop-requested", "--timeout", "1").returncode == 1
    bad = daemon.ctl("wait", "--until-stop-requested", "--batch-id", "../x", "--timeout", "1")
    assert bad.returncode == 1 and "invalid batch-id" in err(bad)
    both = daemon.ctl("wait", "--until-stop-requested", "--until-complete", "--batch-id", "b1")
    assert both.returncode == 1


def test_daemon_answers_timed_out_before_its_own_deadline(daemon: Daemon) -> None:
    """No wait_seconds: the daemon bounds the wait by request.timeout - 0.5 s and answers
    exit 2 with timed_out, never the dispatcher's generic timeout."""
    request = local_request(daemon, p.WaitStopRequested(batch_id="b1", poll_seconds=0.1))
    request.timeout = 1.5
    with daemon.raw() as raw:
        raw.hello()
        started = time.monotonic()
        response = raw.call(request)
        took = time.monotonic() - started
    assert response.exit_code == p.EXIT_OPERATIONAL
    assert response.error is None
    assert response.payload["timed_out"] is True and response.payload["stop_requested"] is False
    assert 0.9 <= took < 1.5


def test_hostile_wait_numbers_are_clamped_not_fatal(daemon: Daemon) -> None:
    request = local_request(daemon, p.WaitStopRequested(batch_id="b1", wait_seconds=0.2,
                                                        poll_seconds=-1.0))
    request.timeout = 1.0
    with daemon.raw() as raw:
        raw.hello()
        response = raw.call(request)
    assert response.exit_code == p.EXIT_OPERATIONAL and response.payload["timed_out"] is True


def test_a_non_finite_wait_is_refused_at_the_boundary(daemon: Daemon) -> None:
    request = local_request(daemon, p.WaitStopRequested(batch_id="b1", wait_seconds=float("nan")))
    with daemon.raw() as raw:
        raw.hello()
        response = raw.call(request)
    assert response.exit_code == p.EXIT_USAGE
    assert "wait_seconds" in response.error and "\n" not in response.error
    assert call_version_ok(daemon)


def call_version_ok(d: Daemon) -> bool:
    with d.raw() as raw:
        raw.hello()
        return raw.call(local_request(d, p.Version())).exit_code == 0


def keep_alive(d: Daemon, agent: str, target: str, batch: str) -> None:
    result = d.ctl("heartbeat", "--agent-id", agent, "--repo", "acme/widgets", "--target", target,
                   "--batch-id", batch, "--keep-alive")
    assert result.returncode == 0, err(result)


def test_lanes_marks_lanes_whose_batch_has_a_stop_request(daemon: Daemon) -> None:
    keep_alive(daemon, "agent-a", "1", "b1")
    keep_alive(daemon, "agent-b", "2", "b2")
    before = json.loads(out(daemon.ctl("lanes", "--json")))["lanes"]
    assert {r["agent_id"]: r["stop_requested"] for r in before} == {"agent-a": False, "agent-b": False}

    daemon.ctl("batch", "stop", "--batch-id", "b1")
    rows = json.loads(out(daemon.ctl("lanes", "--json")))["lanes"]
    text = out(daemon.ctl("lanes"))

    assert {r["agent_id"]: r["stop_requested"] for r in rows} == {"agent-a": True, "agent-b": False}
    header, first, second = text.splitlines()[:3]
    assert "STOP" in header.split()
    assert "requested" in first.split() and first.startswith("agent-a")
    assert "requested" not in second.split()


def test_lanes_stop_requested_is_seen_for_a_stop_written_by_another_tool(daemon: Daemon) -> None:
    keep_alive(daemon, "agent-a", "1", "b1")
    assert json.loads(out(daemon.ctl("lanes", "--json")))["lanes"][0]["stop_requested"] is False
    folder = daemon.root / "events" / "b1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "20260101T000000.000000Z-deadbeef.json").write_text(json.dumps({
        "schema_version": 1, "event_id": "20260101T000000.000000Z-deadbeef", "batch_id": "b1",
        "type": "batch.stop_requested", "at": "2026-01-01T00:00:00Z"}))
    deadline = time.monotonic() + 10  # a cached answer lives at most CACHE_SECONDS
    while True:
        rows = json.loads(out(daemon.ctl("lanes", "--json")))["lanes"]
        if rows[0]["stop_requested"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rows[0]["stop_requested"] is True
