"""Issue 41, finding 2: exit 0 means durable, also when the daemon's state dir is full.

Each path that answers exit 0 for something the backend does not hold yet — an
event in the outbox, a notification in its outbox, a keep-alive lane in the
registry, an answer's notification — is tried with the daemon's state dir on a
full tmpfs of its own: exit 2 naming the directory, nothing torn; then space
comes back and the same daemon (no restart) acknowledges and keeps everything."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.daemon.durable import state_dir_error
from integration.helpers import Daemon

from .full_disk import (
    SmallFs,
    daemon_on,
    outbox_paths,
    queued_events_on_a_full_state_dir,
    read_only,
    small_fs,
    wait_for,
)


@pytest.fixture
def full_state(short_dir: Path) -> Iterator[tuple[Daemon, SmallFs]]:
    """A daemon (local root on the ordinary disk) whose state dir is a small tmpfs;
    notifications go to a command, for help requests and answers."""
    with small_fs() as fs:
        d = daemon_on(short_dir, fs.path / "state", AGENT_COORD_NOTIFY_COMMAND="true",
                      AGENT_COORD_NOTIFY_SIGNALS="help_requested,help_answered")
        d.start()
        try:
            yield d, fs
        finally:
            d.stop()


def _refused_naming_the_state_dir(d: Daemon, result: Any) -> None:
    error = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2, result
    assert f"agentcoordd's state directory {d.state_dir} is full (No space left on device)" in error[-1]
    assert "Traceback" not in result.stderr.decode()


def test_queued_events_are_exit_2_while_the_state_dir_is_full_and_none_acknowledged_is_lost(
        short_dir: Path) -> None:
    figures = queued_events_on_a_full_state_dir(short_dir, events=20)
    assert figures["full_exit_codes"] == {2: 20} and figures["full_errors_naming_dir"] == 20
    assert figures["torn_outbox_bytes"] == 0
    assert figures["acked_after_space_returned"] == 20 and figures["queued"] == 20
    assert figures["delivered"] and figures["acked_lost"] == 0
    assert figures["daemon_alive"]


def test_a_notification_that_cannot_be_queued_is_exit_2_and_the_next_one_is_sent(
        full_state: tuple[Daemon, SmallFs]) -> None:
    d, fs = full_state
    ask = ("record-event", "--batch-id", "b1", "--type", "help_requested", "--reason", "question",
           "--message", "which database?", "--json")
    fs.fill()
    _refused_naming_the_state_dir(d, d.ctl(*ask))
    assert "notification of events/b1/" in d.ctl(*ask).stderr.decode()
    fs.free()
    asked = d.ctl(*ask)
    assert asked.returncode == 0, asked.stderr
    path = json.loads(asked.stdout)["path"]
    assert wait_for(lambda: (d.state_dir / "notified.jsonl").exists()
                    and path in (d.state_dir / "notified.jsonl").read_text())


def test_an_answer_whose_notification_cannot_be_queued_is_exit_2(
        full_state: tuple[Daemon, SmallFs]) -> None:
    d, fs = full_state
    asked = d.ctl("record-event", "--batch-id", "b1", "--type", "help_requested", "--reason",
                  "question", "--message", "staging or prod?", "--json")
    assert asked.returncode == 0, asked.stderr
    request = json.loads(asked.stdout)["event"]["event_id"]
    pending = d.state_dir / "notifications.jsonl"  # the request's, sent: emptied, no page left
    assert wait_for(lambda: pending.exists() and pending.stat().st_size == 0)
    answer = ("answer", "--batch-id", "b1", "--to-event", request, "--message", "staging",
              "--agent-id", "lead", "--json")
    fs.fill()
    _refused_naming_the_state_dir(d, d.ctl(*answer))
    fs.free()
    answered = d.ctl(*answer)
    assert answered.returncode == 0, answered.stderr
    assert wait_for(lambda: json.loads(answered.stdout)["path"]
                    in (d.state_dir / "notified.jsonl").read_text())


@pytest.mark.parametrize("register", [
    ("heartbeat", "--agent-id", "keeper", "--ttl", "60", "--keep-alive"),
    ("claim", "--agent-id", "keeper", "--repo", "acme/widgets", "--target", "1", "--keep-alive"),
], ids=["heartbeat", "claim"])
def test_a_keep_alive_lane_that_cannot_be_saved_is_exit_2_and_is_saved_once_space_returns(
        full_state: tuple[Daemon, SmallFs], register: tuple[str, ...]) -> None:
    d, fs = full_state
    lanes = d.state_dir / "lanes.json"
    fs.fill()
    _refused_naming_the_state_dir(d, d.ctl(*register))
    assert not lanes.exists() or "keeper" not in lanes.read_text()
    fs.free()  # no further command: the daemon saves it by itself
    assert wait_for(lambda: lanes.exists() and "keeper" in lanes.read_text(), timeout=15)
    again = d.ctl(*register)
    assert again.returncode == 0, again.stderr
    assert "keeper" in lanes.read_text()  # on disk when exit 0 was answered


def test_a_lanes_stop_that_cannot_be_saved_is_exit_2(full_state: tuple[Daemon, SmallFs]) -> None:
    d, fs = full_state
    assert d.ctl("heartbeat", "--agent-id", "keeper", "--ttl", "60", "--keep-alive").returncode == 0
    fs.fill()
    _refused_naming_the_state_dir(d, d.ctl("lanes", "stop", "--agent-id", "keeper"))
    fs.free()
    lanes = d.state_dir / "lanes.json"
    assert wait_for(lambda: "keeper" not in lanes.read_text(), timeout=15)


def test_a_read_only_state_dir_is_exit_2_and_writable_again_without_a_restart(
        short_dir: Path) -> None:
    with small_fs() as backend:
        d = daemon_on(short_dir, short_dir / "state")
        d.root = backend.path / "root"
        d.root.mkdir()
        d.start()
        try:
            backend.fill()  # the backend cannot take the event: it goes to the outbox
            record = ("record-event", "--batch-id", "b1", "--type", "note", "--queue-on-failure")
            with read_only(d.state_dir):
                refused = d.ctl(*record)
                assert refused.returncode == 2
                assert (f"agentcoordd's state directory {d.state_dir} is read-only (Read-only file "
                        "system)") in refused.stderr.decode()
                lane = d.ctl("heartbeat", "--agent-id", "k", "--ttl", "60", "--keep-alive",
                             "--state-root", str(short_dir / "other-root"))
                assert lane.returncode == 2 and "is read-only" in lane.stderr.decode()
            assert d.ctl(*record).returncode == 0
            assert len(outbox_paths(d.state_dir)) == 1
        finally:
            d.stop()


@pytest.mark.parametrize(("error", "words"), [
    (28, "is full (No space left on device)"), (5, "has an I/O error (Input/output error)"),
    (30, "is read-only (Read-only file system)")])
def test_the_message_says_what_happened_to_the_directory(error: int, words: str) -> None:
    import os

    message = state_dir_error("/s", "event e was not queued", OSError(error, os.strerror(error))).message
    assert message.startswith(f"event e was not queued: agentcoordd's state directory /s {words}")
