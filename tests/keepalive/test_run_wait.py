"""`run -- COMMAND` and `wait` against a real daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from integration.helpers import PYTHON, Daemon

from .support import NO_HOSTS, ctl, heartbeat, lane, wait_until


def _claim(d: Daemon, target: str) -> dict:
    return json.loads((d.root / "claims" / "acme" / "widgets" / f"{target}.json").read_text())


def test_run_exits_with_the_commands_code_and_releases(daemon: Daemon) -> None:
    marker = daemon.base / "ran"
    result = ctl(daemon, "run", "--agent-id", "runner", "--repo", "acme/widgets", "--target", "3",
                 "--heartbeat-ttl", "2", "--", sys.executable, "-c",
                 f"import pathlib, sys; pathlib.Path({str(marker)!r}).write_text('x'); "
                 "print('from the command'); sys.exit(5)")
    assert result.returncode == 5, result.stderr
    assert result.stdout == b"from the command\n"
    assert marker.exists()
    assert _claim(daemon, "3")["status"] == "released"
    row = lane(daemon, "runner")
    # COMMAND's exit is seen by two documented triggers: ctl's release and the
    # daemon's pid watch (every 0.5 s). Which ends the lane first is timing (a
    # loaded machine delays ctl); the claim is released either way. The other
    # order is forced in the next test.
    assert row["state"] == "ended"
    assert row["end_reason"] in ("released", "watched_process_exited")
    assert b"claimed acme/widgets#3 by runner" in result.stderr


def test_run_releases_even_when_the_daemon_saw_the_command_exit_first(daemon: Daemon) -> None:
    """ctl stopped between COMMAND's exit and its release: the pid watch ends the lane first,
    and the daemon releases the claim on the agent's behalf (issue 40: free in seconds)."""
    proc = subprocess.Popen(
        [PYTHON, "-m", "agentcoordctl.cli", "run", "--agent-id", "slow-ctl", "--repo",
         "acme/widgets", "--target", "7", "--heartbeat-ttl", "2", "--",
         "sh", "-c", "kill -STOP $PPID; exit 4"],
        env=daemon.env(**NO_HOSTS), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        row = wait_until(lambda: (r := lane(daemon, "slow-ctl")) and r["state"] == "ended" and r, 10.0)
        assert row["end_reason"] == "watched_process_exited"
        # ctl is still stopped; the daemon released the claim for the next agent
        released = wait_until(lambda: (c := _claim(daemon, "7"))["status"] == "released" and c, 5.0)
        assert released["release_mode"] == "holder_exited"
        os.kill(proc.pid, signal.SIGCONT)
        _, stderr = proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 4, stderr
    assert _claim(daemon, "7")["status"] == "released"


def test_run_keeps_the_lane_alive_while_the_command_runs(daemon: Daemon) -> None:
    proc = subprocess.Popen(
        [PYTHON, "-m", "agentcoordctl.cli", "run", "--agent-id", "long", "--repo", "acme/widgets",
         "--target", "4", "--heartbeat-ttl", "2", "--", "sleep", "4.5"],
        env=daemon.env(**NO_HOSTS), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        row = wait_until(lambda: lane(daemon, "long"), 5.0)
        assert row["state"] == "active" and row["watch_pid"]
        # watching the command itself (exec kept the pid), not ctl
        assert row["watch_pid"] != proc.pid
        time.sleep(3.0)  # past the first TTL: alive only because the daemon renews it
        from .support import state_of

        assert state_of(heartbeat(daemon, "long")) == "live"
        assert proc.wait(10) == 0
    finally:
        proc.kill()
    assert _claim(daemon, "4")["status"] == "released"


def test_run_refused_claim_exits_3_without_running_the_command(daemon: Daemon) -> None:
    assert ctl(daemon, "claim", "--agent-id", "holder", "--repo", "acme/widgets",
               "--target", "5").returncode == 0
    ctl(daemon, "heartbeat", "--agent-id", "holder")
    marker = daemon.base / "must-not-exist"
    result = ctl(daemon, "run", "--agent-id", "late", "--repo", "acme/widgets", "--target", "5",
                 "--", "touch", str(marker))
    assert result.returncode == 3
    assert b"CLAIM_REFUSED" in result.stderr
    assert not marker.exists()
    assert lane(daemon, "late") is None


def test_run_terminates_the_command_after_a_takeover_and_the_fence_grace(daemon: Daemon) -> None:
    proc = subprocess.Popen(
        [PYTHON, "-m", "agentcoordctl.cli", "run", "--agent-id", "fenced", "--repo", "acme/widgets",
         "--target", "6", "--heartbeat-ttl", "2", "--renew-every", "0.2", "--fence-grace", "0.5",
         "--", "sleep", "30"],
        env=daemon.env(**NO_HOSTS), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: lane(daemon, "fenced"), 5.0)
        path = daemon.root / "claims" / "acme" / "widgets" / "6.json"
        record = json.loads(path.read_text())
        record.update(agent_id="usurper", claimed_at="2099-01-01T00:00:00Z")
        path.write_text(json.dumps(record))
        _, stderr = proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 128 + 15  # SIGTERM
    assert b"taken over by usurper" in stderr
    assert json.loads(path.read_text())["agent_id"] == "usurper"  # never released by us


BATCH = {"batch_id": "b-wait", "repo": "acme/widgets", "lanes": [
    {"name": "api", "owner": "agent-api", "targets": ["1"]},
    {"name": "ui", "owner": "agent-ui", "targets": ["2"], "depends_on": ["b-wait:api"]},
]}


def test_wait_returns_when_a_dependency_lane_reports_done(daemon: Daemon) -> None:
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    assert ctl(daemon, "register-batch", "--file", str(manifest)).returncode == 0
    assert ctl(daemon, "heartbeat", "--agent-id", "agent-api", "--status", "in_progress").returncode == 0
    waiter = subprocess.Popen(
        [PYTHON, "-m", "agentcoordctl.cli", "wait", "--until-unblocked", "--batch-id", "b-wait",
         "--lane", "ui", "--timeout", "20", "--interval", "0.1"],
        env=daemon.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        assert waiter.poll() is None
        assert ctl(daemon, "heartbeat", "--agent-id", "agent-api", "--status", "done").returncode == 0
        done_at = time.monotonic()
        out, err = waiter.communicate(timeout=5)
        assert waiter.returncode == 0
        assert time.monotonic() - done_at < 2.0
    finally:
        waiter.kill()
        waiter.communicate()
    assert out == b"unblocked: lane ui of b-wait is unblocked\n"
    assert b"blocked on b-wait:api" in err


def _register(daemon: Daemon) -> None:
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    assert ctl(daemon, "register-batch", "--file", str(manifest)).returncode == 0


def _waiter(daemon: Daemon, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [PYTHON, "-m", "agentcoordctl.cli", "wait", "--until-unblocked", "--batch-id", "b-wait",
         "--lane", "ui", "--timeout", "60", "--interval", "0.1", *extra],
        env=daemon.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_daemon_restart_ends_its_waits_at_once_and_the_wait_goes_on(daemon: Daemon) -> None:
    _register(daemon)
    waiter = _waiter(daemon, "--json")
    try:
        time.sleep(1.5)  # inside a long daemon-side slice
        stopping = time.monotonic()
        assert daemon.stop() == 0
        assert time.monotonic() - stopping < 3.0  # not held up by the 30 s slice
        assert waiter.poll() is None  # ctl waits on for the next daemon
        daemon.start()
        closed = ctl(daemon, "record-event", "--batch-id", "b-wait", "--type", "lane_closed",
                     "--lane", "api", "--agent-id", "agent-api", "--repo", "acme/widgets",
                     "--target", "1", "--terminal", "done", "--host", "m1")
        assert closed.returncode == 0, closed.stderr
        out, err = waiter.communicate(timeout=10)
    finally:
        waiter.kill()
        waiter.communicate()
    assert waiter.returncode == 0, err
    answer = json.loads(out)
    assert answer["met"] is True and answer["lane"]["blocked_on"] == []
    assert answer["lane"]["deps"] == ["b-wait:api"]
    assert b"agentcoordd is stopping" in err or b"not running" in err


def test_a_recorded_lane_closed_unblocks_before_the_manifest_stamp(daemon: Daemon) -> None:
    _register(daemon)
    event = {"schema_version": 2, "event_id": "x", "batch_id": "b-wait", "type": "lane_closed",
             "lane": "api", "terminal": "done"}
    from agentcoordd.model import ids

    path = daemon.root / ids.event_path("b-wait", ids.lane_closed_event_id("api"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(event))  # the event landed; the stamp has not (yet)
    assert json.loads((daemon.root / "batches" / "b-wait.json").read_text())["lanes"][0].get("terminal") is None
    result = ctl(daemon, "wait", "--until-unblocked", "--batch-id", "b-wait", "--lane", "ui",
                 "--timeout", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"unblocked: lane ui of b-wait is unblocked\n"


def test_wait_until_unblocked_rejects_hostile_names_and_reports_missing_ones(daemon: Daemon) -> None:
    _register(daemon)
    for batch, lane_name in (("../x", "ui"), ("b-wait", "../x"), ("", "ui"), ("b-wait", "ü" * 300),
                             ("b" * 5000, "ui")):
        result = ctl(daemon, "wait", "--until-unblocked", "--batch-id", batch, "--lane", lane_name,
                     "--timeout", "2")
        assert result.returncode == 1, (batch, lane_name, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and b"Traceback" not in result.stderr
    missing = ctl(daemon, "wait", "--until-unblocked", "--batch-id", "b-wait", "--lane", "nope",
                  "--timeout", "0.5", "--json")
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["detail"] == "lane nope not in batch b-wait"
    started = time.monotonic()
    absent = ctl(daemon, "wait", "--until-unblocked", "--batch-id", "b-none", "--lane", "ui",
                 "--timeout", "600")  # a mistyped batch ends the wait at once, naming it
    assert absent.returncode == 2 and absent.stderr == (
        b"wait: batch b-none is not registered (check --batch-id); nothing to wait for\n")
    assert time.monotonic() - started < 10


def test_wait_times_out_with_exit_2_and_checks_free_and_complete(daemon: Daemon) -> None:
    assert ctl(daemon, "claim", "--agent-id", "busy", "--repo", "acme/widgets", "--target", "9").returncode == 0
    ctl(daemon, "heartbeat", "--agent-id", "busy")
    timed_out = ctl(daemon, "wait", "--until-free", "--repo", "acme/widgets", "--target", "9",
                    "--timeout", "0.5", "--interval", "0.1")
    assert timed_out.returncode == 2 and b"timed out" in timed_out.stderr
    assert ctl(daemon, "release", "--agent-id", "busy", "--repo", "acme/widgets",
               "--target", "9").returncode == 0
    free = ctl(daemon, "wait", "--until-free", "--repo", "acme/widgets", "--target", "9",
               "--timeout", "5")
    assert free.returncode == 0 and b"released" in free.stdout
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    ctl(daemon, "register-batch", "--file", str(manifest))
    for agent in ("agent-api", "agent-ui"):
        ctl(daemon, "heartbeat", "--agent-id", agent, "--status", "done")
    complete = ctl(daemon, "wait", "--until-complete", "--batch-id", "b-wait", "--timeout", "5")
    assert complete.returncode == 0, complete.stderr
    usage = ctl(daemon, "wait", "--until-free", "--repo", "acme/widgets")
    assert usage.returncode == 1
