"""Notifications to people (docs/notifications.md), end to end: a real daemon
subprocess, ctl subprocesses, a real loopback HTTP receiver in a thread.

Each configured signal reaches the receiver exactly once (by event id), an
unconfigured event type never; across a daemon SIGKILL and a 30 s receiver
outage; the command form gets the JSON on stdin; a hanging webhook does not
slow the write that caused it.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentcoordd import protocol as p
from agentcoordd.daemon.notify import DEFAULT_SIGNALS

from .helpers import Daemon, local_request

REPO = "acme/widgets"
BATCH = {"batch_id": "b1", "repo": REPO, "lanes": [
    {"name": "backend", "owner": "agent-a", "targets": ["1"]}]}


class Receiver:
    """A loopback webhook: records every POST; `hang` holds answers; `stop()` closes the port."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.hang = threading.Event()  # set: answer nothing until cleared
        self.port = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self.start()

    def start(self) -> None:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                while receiver.hang.is_set():
                    time.sleep(0.05)
                receiver.posts.append({"headers": dict(self.headers), "body": json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Down: connections to the port are refused until start()."""
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/secret-path"

    def ids(self) -> Counter:
        return Counter(post["body"]["event_id"] for post in self.posts)


@pytest.fixture
def receiver() -> Any:
    r = Receiver()
    yield r
    r.hang.clear()
    if r._server is not None:
        r.stop()


def configure(d: Daemon, **notifications: Any) -> Path:
    """Write the daemon's agentcoordd.toml under its XDG_CONFIG_HOME."""
    path = d.base / "xdgconfig" / "agentcoord" / "agentcoordd.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["[notifications]"] + [f"{k} = {json.dumps(v)}" for k, v in notifications.items()]
    path.write_text("\n".join(lines) + "\n")
    d.extra_env["XDG_CONFIG_HOME"] = str(d.base / "xdgconfig")
    return path


def ok(result: Any) -> Any:
    assert result.returncode == 0, result.stderr.decode()
    return result


def signal_events(d: Daemon) -> None:
    """One event per default signal, plus events no default signal matches."""
    manifest = d.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    ok(d.ctl("register-batch", "--file", str(manifest)))
    ok(d.ctl("claim", "--agent-id", "agent-a", "--repo", REPO, "--target", "1", "--batch-id", "b1"))
    for typed in (["help_requested", "--reason", "question", "--message", "which API?"],
                  ["escalation_requested", "--from-route", "agent", "--to-route", "human",
                   "--evidence", "ci red"],
                  ["error", "--severity", "P0", "--category", "ci", "--message", "down"],
                  ["error", "--severity", "P1", "--category", "ci", "--message", "flaky"],
                  ["error", "--severity", "P2", "--category", "ci", "--message", "minor"],
                  ["human_intervention", "--kind", "takeover"],
                  ["note"]):
        ok(d.ctl("record-event", "--batch-id", "b1", "--agent-id", "agent-a", "--type", *typed))
    ok(d.ctl("batch", "stop", "--batch-id", "b1", "--message", "stop now"))
    ok(d.ctl("batch", "block", "--batch-id", "b1", "--message", "which train?", "--decision", "A"))
    ok(d.ctl("release", "--agent-id", "agent-a", "--repo", REPO, "--target", "1",
             "--terminal", "abandoned", env={"AGENT_COORD_MACHINE_ID": "m1"}))
    # claim.released:holder_exited: an agent process dies holding a keep-alive claim
    agent = subprocess.Popen(["sleep", "60"])
    ok(d.ctl("claim", "--agent-id", "agent-x", "--repo", REPO, "--target", "2", "--batch-id", "b1",
             "--keep-alive", "--watch-pid", str(agent.pid)))
    agent.kill()
    agent.wait()
    assert wait_for(lambda: any(e.get("release_mode") == "holder_exited"
                                for e in written_events(d).values()), 10.0)


def written_events(d: Daemon) -> dict[str, dict[str, Any]]:
    out = {}
    for path in (d.root / "events" / "b1").glob("*.json"):
        record = json.loads(path.read_text())
        out[record["event_id"]] = record
    return out


def expected_ids(d: Daemon) -> set[str]:
    """The event ids a default configuration notifies, read from the state itself."""
    from agentcoordd.daemon.notify import matching_signal

    return {eid for eid, record in written_events(d).items()
            if matching_signal(record, DEFAULT_SIGNALS)}


def wait_for(condition: Any, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def outbox(d: Daemon) -> dict[str, Any]:
    return json.loads(d.ctl("outbox", "--json").stdout)


def notifications(d: Daemon) -> list[dict[str, Any]]:
    return [e for e in outbox(d)["entries"] if e["kind"] == "notification"]


def kill(d: Daemon) -> None:
    assert d.proc is not None
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(10)


def assert_exactly_once(r: Receiver, d: Daemon) -> None:
    expected = expected_ids(d)
    assert len(expected) == len(DEFAULT_SIGNALS)  # one event per default signal
    assert wait_for(lambda: set(r.ids()) >= expected, 20.0), (r.ids(), expected)
    time.sleep(1.5)  # a duplicate would have had time to arrive
    assert r.ids() == Counter({eid: 1 for eid in expected})
    events = written_events(d)
    for post in r.posts:
        body = post["body"]
        assert post["headers"]["X-Agentcoord-Event-Id"] == body["event_id"]
        assert body["event"] == events[body["event_id"]]
        assert post["headers"]["X-Agentcoord-Signal"] == body["signal"]
    assert sorted(post["body"]["signal"] for post in r.posts) == sorted(DEFAULT_SIGNALS)


def test_each_configured_signal_arrives_once_and_other_events_never(
        daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    configure(d, webhook=receiver.url, backoff_cap_seconds=1)
    d.start()
    signal_events(d)
    assert_exactly_once(receiver, d)
    types = {post["body"]["event"]["type"] for post in receiver.posts}
    assert not types & {"note", "claim.acquired"}
    assert [post["body"]["event"]["release_mode"] for post in receiver.posts
            if post["body"]["event"]["type"] == "claim.released"] == ["holder_exited"]
    assert notifications(d) == []


def test_notifications_queued_before_a_sigkill_are_delivered_once_after_the_restart(
        daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    configure(d, webhook=receiver.url, backoff_cap_seconds=1, timeout_seconds=2)
    receiver.stop()
    d.start()
    signal_events(d)  # every write exits 0 while the receiver is down
    queued = notifications(d)
    assert len(queued) == len(DEFAULT_SIGNALS)
    kill(d)  # entries are on disk (fsync'd before each reply), nothing was delivered
    receiver.start()
    d.start()
    assert_exactly_once(receiver, d)
    assert notifications(d) == []


@pytest.mark.slow
def test_a_30s_outage_and_a_sigkill_deliver_each_signal_exactly_once_with_visible_backoff(
        daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    configure(d, webhook=receiver.url, backoff_cap_seconds=4, timeout_seconds=2)
    d.start()
    receiver.stop()
    down_at = time.monotonic()
    signal_events(d)
    time.sleep(8)
    during = notifications(d)
    assert {e["signal"] for e in during} == set(DEFAULT_SIGNALS)
    assert all(e["attempts"] >= 2 and e["last_error"] for e in during), during
    # backoff: after several failures the next try waits (up to the 4 s cap), not a poll
    assert max(e["next_try_in"] for e in during) > 1.0
    kill(d)
    d.start()  # the outage goes on across the restart; attempts are remembered
    assert all(e["attempts"] >= 2 for e in notifications(d))
    time.sleep(max(0.0, 30.0 - (time.monotonic() - down_at)))
    back_at = time.monotonic()
    receiver.start()
    assert_exactly_once(receiver, d)
    print(f"\noutage {back_at - down_at:.1f}s; all delivered "
          f"{max(0.0, time.monotonic() - back_at - 1.5):.1f}s after the receiver came back")
    assert notifications(d) == []


def test_an_event_queued_for_its_backend_notifies_once_not_again_when_delivered_late(
        daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    configure(d, webhook=receiver.url)
    d.start()
    broken = d.base / "not-yet"
    broken.write_text("a file where the state root should be: every write fails")
    result = ok(d.ctl("record-event", "--batch-id", "b1", "--type", "help_requested", "--reason",
                      "question", "--queue-on-failure", "--json",
                      env={"AGENT_COORD_STATE_ROOT": str(broken)}))
    queued = json.loads(result.stdout)
    assert queued["action"] == "queued"
    assert wait_for(lambda: len(receiver.posts) == 1, 10.0)  # told now, not after the outage
    broken.unlink()
    broken.mkdir()
    stored = broken / queued["path"]
    assert wait_for(stored.exists, 15.0)  # the event outbox delivered it (2 s backoff)
    time.sleep(1.5)
    assert receiver.ids() == Counter({queued["event"]["event_id"]: 1})


def test_a_lifecycle_event_of_the_renewal_loop_notifies_when_configured(
        daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    configure(d, webhook=receiver.url, signals=["lane.keepalive_ended:released"])
    d.start()
    ok(d.ctl("claim", "--agent-id", "agent-a", "--repo", REPO, "--target", "1", "--batch-id", "b1",
             "--keep-alive", "--heartbeat-ttl", "5"))
    ok(d.ctl("release", "--agent-id", "agent-a", "--repo", REPO, "--target", "1"))
    assert wait_for(lambda: len(receiver.posts) == 1, 10.0)
    time.sleep(1.0)
    [post] = receiver.posts
    assert post["body"]["signal"] == "lane.keepalive_ended:released"
    assert post["body"]["event"]["type"] == "lane.keepalive_ended"
    assert post["body"]["event"]["agent_id"] == "agent-a"


def test_the_command_form_gets_the_event_json_on_stdin(daemon_factory: Any) -> None:
    d = daemon_factory()
    script = d.base / "notify.py"
    seen = d.base / "seen.jsonl"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        if os.path.exists(sys.argv[1] + ".fail"):
            sys.stderr.write("receiver says no\\n")
            sys.exit(3)
        body = json.load(sys.stdin)
        with open(sys.argv[1], "a") as out:
            out.write(json.dumps({"body": body, "signal": os.environ["AGENTCOORD_SIGNAL"]}) + "\\n")
    """))
    # The env file form (the consumer env file agent-coord reads too).
    env_file = d.base / "xdgconfig" / "agent-coord" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text(f"AGENT_COORD_NOTIFY_COMMAND='{sys.executable} {script} {seen}'\n"
                        "AGENT_COORD_NOTIFY_SIGNALS=help_requested,note\n"
                        "AGENT_COORD_NOTIFY_BACKOFF_CAP=1\n")
    d.extra_env["XDG_CONFIG_HOME"] = str(d.base / "xdgconfig")
    d.start()
    Path(str(seen) + ".fail").touch()
    ok(d.ctl("record-event", "--batch-id", "b1", "--type", "note", "--message", "hello"))
    assert wait_for(lambda: any(e["attempts"] for e in notifications(d)), 10.0)
    [failing] = notifications(d)
    assert failing["target"] == "command" and failing["signal"] == "note"
    assert "command exited 3: receiver says no" in failing["last_error"]
    os.unlink(str(seen) + ".fail")
    ok(d.ctl("record-event", "--batch-id", "b1", "--type", "help_requested", "--reason",
             "permission"))
    ok(d.ctl("record-event", "--batch-id", "b1", "--type", "error", "--severity", "P0",
             "--category", "ci", "--message", "not configured here"))
    assert wait_for(lambda: seen.exists() and len(seen.read_text().splitlines()) >= 2, 10.0)
    time.sleep(1.5)
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    assert sorted(line["signal"] for line in lines) == ["help_requested", "note"]
    events = written_events(d)
    for line in lines:
        assert line["body"]["event"] == events[line["body"]["event_id"]]
        assert line["body"]["signal"] == line["signal"]
    assert notifications(d) == []


def timed_writes(d: Daemon, n: int) -> list[float]:
    took = []
    with d.raw() as raw:
        raw.hello()
        for i in range(n):
            request = local_request(d, p.RecordEvent(
                batch_id="b1", type="help_requested", typed={"reason": "question"},
                message=f"q{i}", timeout=30.0))
            start = time.perf_counter()
            reply = raw.call(request)
            took.append(time.perf_counter() - start)
            assert reply.exit_code == 0, reply.error
    return took


def test_a_hanging_webhook_does_not_slow_the_write(daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    configure(d, webhook=receiver.url, timeout_seconds=5, backoff_cap_seconds=1)
    d.start()
    baseline = timed_writes(d, 10)
    assert wait_for(lambda: len(receiver.posts) == 10, 10.0)
    receiver.hang.set()
    hung = timed_writes(d, 10)
    print(f"\nwrite latency p50 {statistics.median(baseline) * 1000:.1f} ms (webhook answers), "
          f"{statistics.median(hung) * 1000:.1f} ms (webhook hangs), max {max(hung) * 1000:.1f} ms")
    assert max(hung) < 1.0  # far below the 5 s webhook timeout
    assert statistics.median(hung) < statistics.median(baseline) * 3 + 0.05
    receiver.hang.clear()  # within the 5 s timeout: the held request completes, nothing repeats
    assert wait_for(lambda: len(receiver.ids()) == 20, 20.0)
    time.sleep(1.0)
    assert set(receiver.ids().values()) == {1}


def test_a_config_file_written_while_the_daemon_runs_applies_without_a_restart(
        daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    d.extra_env["XDG_CONFIG_HOME"] = str(d.base / "xdgconfig")
    d.start()
    ok(d.ctl("record-event", "--batch-id", "b1", "--type", "human_intervention", "--kind", "drain"))
    configure(d, webhook=receiver.url)
    ok(d.ctl("record-event", "--batch-id", "b1", "--type", "human_intervention", "--kind", "drain"))
    assert wait_for(lambda: len(receiver.posts) == 1, 10.0)
    time.sleep(1.0)
    assert len(receiver.posts) == 1  # the event before the file existed does not notify
    shown = json.loads(ok(d.ctl("config", "show", "--json")).stdout)["notifications"]
    assert shown["configured"] is True and shown["sources"]["webhook"].startswith(
        "notifications.webhook (config file ")


def test_bad_configuration_is_one_line_in_the_log_and_in_doctor_and_the_daemon_runs(
        daemon_factory: Any) -> None:
    d = daemon_factory()
    configure(d, webhook="ftp://example.invalid/x", signals=["help_requested", "error:P9"])
    d.start()
    errors = [e for e in d.log_events() if "notification configuration" in str(e.get("event"))]
    assert len(errors) == 2, errors
    doctor = d.ctl("doctor")
    assert "warning: notification configuration: notifications.webhook" in doctor.stderr.decode()
    assert "not an http(s) URL: 'ftp://example.invalid/…'" in doctor.stderr.decode()
    shown = json.loads(ok(d.ctl("config", "show", "--json")).stdout)["notifications"]
    assert shown["configured"] is False and shown["signals"] == ["help_requested"]
    assert len(shown["errors"]) == 2
    ok(d.ctl("record-event", "--batch-id", "b1", "--type", "help_requested", "--reason",
             "question"))


def test_config_show_redacts_the_webhook_and_command(daemon_factory: Any, receiver: Receiver) -> None:
    d = daemon_factory()
    configure(d, webhook=receiver.url + "?token=s3cret", command="notify-send --token s3cret")
    d.start()
    shown = json.loads(ok(d.ctl("config", "show", "--json")).stdout)["notifications"]
    assert shown["webhook"] == f"http://127.0.0.1:{receiver.port}/…"
    assert shown["command"] == "notify-send … (2 arguments)"
    assert "s3cret" not in json.dumps(shown) and "secret-path" not in json.dumps(shown)
    assert shown["signals"] == list(DEFAULT_SIGNALS)
    text = ok(d.ctl("config", "show")).stdout.decode()
    assert text.splitlines()[-1] == (
        f"notifications: webhook http://127.0.0.1:{receiver.port}/… and command notify-send … "
        f"(2 arguments); signals: {','.join(DEFAULT_SIGNALS)}")
    assert "s3cret" not in text
