"""Notification settings, signal matching, dedupe and backoff (daemon/notify.py) over
real files in a temp dir; the end-to-end behaviour is tests/integration/test_notifications.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx

from machine_config import machine

from agentcoordd.daemon import notify
from agentcoordd.daemon.dashboard import Dashboard
from agentcoordd.daemon.notify import DEFAULT_SIGNALS, Notifier, Sent, load_settings, matching_signal
from agentcoordd.daemon.outbox import Outbox
from agentcoordd.model.backoff import Backoff
from agentcoordd.model.identity import Identity
from agentcoordd.store.local import LocalStore


def test_environment_beats_env_file_beats_config_file(tmp_path: Path) -> None:
    env = machine(tmp_path,
                  toml='[notifications]\nwebhook = "http://toml/h"\ncommand = ["cat"]\n'
                       'signals = ["note"]\ntimeout_seconds = 3\n',
                  env_file="export AGENT_COORD_NOTIFY_WEBHOOK=http://file/h\n"
                           "AGENT_COORD_NOTIFY_SIGNALS='default note'\n",
                  AGENT_COORD_NOTIFY_SIGNALS="help_requested")
    s = load_settings(env)
    assert (s.webhook, s.command, s.signals, s.timeout) == ("http://file/h", ("cat",),
                                                            ("help_requested",), 3.0)
    assert s.sources["signals"] == "AGENT_COORD_NOTIFY_SIGNALS (environment)"
    assert s.sources["webhook"].startswith("AGENT_COORD_NOTIFY_WEBHOOK (env file ")
    assert s.sources["command"].startswith("notifications.command (config file ")
    assert s.errors == ()


def test_nothing_configured_means_no_targets_and_the_default_signals(tmp_path: Path) -> None:
    s = load_settings(machine(tmp_path))
    assert s.targets == () and s.signals == DEFAULT_SIGNALS and s.errors == ()


def test_default_expands_and_bad_entries_are_reported_not_fatal(tmp_path: Path) -> None:
    s = load_settings(machine(tmp_path, AGENT_COORD_NOTIFY_SIGNALS="default,phase.changed,error:P7",
                              AGENT_COORD_NOTIFY_COMMAND="say 'unterminated",
                              AGENT_COORD_NOTIFY_TIMEOUT="-1"))
    assert s.signals == (*DEFAULT_SIGNALS, "phase.changed")
    assert s.command is None and s.timeout == notify.DEFAULT_TIMEOUT
    assert len(s.errors) == 3
    assert any("unknown signal 'error:P7'" in e for e in s.errors)
    assert any("cannot be split into arguments" in e for e in s.errors)


def test_an_unreadable_config_file_is_one_error_and_ignored(tmp_path: Path) -> None:
    s = load_settings(machine(tmp_path, toml="[notifications\nwebhook = 1"))
    assert s.targets == ()
    [error] = s.errors
    assert error.startswith("config file ") and "not valid TOML" in error


def test_an_explicit_config_path_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    s = load_settings(machine(tmp_path, AGENT_COORD_DAEMON_CONFIG=str(tmp_path / "none.toml")))
    assert s.errors == (f"config file {tmp_path / 'none.toml'}: does not exist (ignored)",)


def test_signals_match_on_type_and_qualifier() -> None:
    assert matching_signal({"type": "error", "severity": "P0"}, DEFAULT_SIGNALS) == "error:P0"
    assert matching_signal({"type": "error", "severity": "P3"}, DEFAULT_SIGNALS) is None
    assert matching_signal({"type": "lane_closed", "terminal": "abandoned"},
                           DEFAULT_SIGNALS) == "lane_closed:abandoned"
    assert matching_signal({"type": "lane_closed", "terminal": "done"}, DEFAULT_SIGNALS) is None
    assert matching_signal({"type": "batch.stop_requested"}, DEFAULT_SIGNALS) == "batch.stop_requested"
    assert matching_signal({"type": "phase.changed", "status": "blocked"},
                           ("phase.changed:blocked",)) == "phase.changed:blocked"
    assert matching_signal({"type": "claim.acquired"}, DEFAULT_SIGNALS) is None


def event(i: int, type_: str = "help_requested") -> tuple[str, dict[str, Any]]:
    eid = f"20260101T000000.{i:06d}Z-0000000{i % 10}"
    return f"events/b1/{eid}.json", {"event_id": eid, "batch_id": "b1", "type": type_,
                                     "reason": "question"}


async def test_an_event_is_queued_once_per_target_and_never_after_delivery(tmp_path: Path) -> None:
    env = machine(tmp_path, AGENT_COORD_NOTIFY_WEBHOOK="http://127.0.0.1:9/h",
                  AGENT_COORD_NOTIFY_COMMAND="true")
    n = Notifier(state_dir=str(tmp_path / "state"), env=env)
    await n.notice([event(1), event(2, "note")])
    await n.notice([event(1)])  # the same event again (say, delivered late from the outbox)
    assert sorted((e.backend["kind"], e.path) for e in n.outbox.entries()) == [
        ("command", event(1)[0]), ("webhook", event(1)[0])]
    n.sent.add(notify.key_of("webhook", event(1)[0]), 1.0)
    assert await n.flush() == (2, 0)  # the command ran (`true`); the webhook key was delivered
    await n.notice([event(1)])
    assert n.outbox.entries() == []
    assert notify.key_of("webhook", event(1)[0]) in Sent(tmp_path / "state")  # after a restart


def test_delivered_keys_are_compacted_to_the_newest(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(notify, "MAX_REMEMBERED", 3)
    sent = Sent(tmp_path)
    for i in range(7):
        sent.add(f"k{i}", float(i))
    again = Sent(tmp_path)
    assert set(again.keys) == {"k4", "k5", "k6"} and again.lines == 3


async def test_backoff_counts_from_the_last_attempt_and_is_capped(tmp_path: Path) -> None:
    now = [1000.0]
    box = Outbox(tmp_path, lambda: now[0], name="n", backoff=Backoff(first=2.0, cap=5.0))
    box.append(*event(1), {"kind": "webhook", "key": "notify:webhook"}, signal="help_requested")

    async def down(entry: Any) -> None:
        raise OSError("refused")

    waits = []
    for _ in range(5):
        await box.flush(down, force=True)
        [entry] = box.entries()
        waits.append(box.next_try(entry) - now[0])
        now[0] += 100.0  # long after: the next pause still counts from this attempt
    assert waits == [2.0, 4.0, 5.0, 5.0, 5.0]
    assert box.entries()[0].signal == "help_requested"


async def test_a_stop_requested_from_the_dashboard_is_handed_to_notifications(
        tmp_path: Path, clock: Any) -> None:
    store = LocalStore(tmp_path / "root")
    seen: list[tuple[str, dict[str, Any]]] = []

    async def on_events(events: list[tuple[str, dict[str, Any]]]) -> None:
        seen.extend(events)

    board = Dashboard(lambda: store, clock, Identity(machine_id="m1"), on_events=on_events)
    async with anyio.create_task_group() as tg:
        await tg.start(board.serve)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{board.port}") as client:
            response = await client.post("/api/stop", json={"batch_id": "b1"}, headers={
                "Origin": f"http://127.0.0.1:{board.port}", "X-Agentcoord-CSRF": board.csrf_token,
                "Authorization": f"Bearer {board.token}"})
        tg.cancel_scope.cancel()
    assert response.status_code == 201, response.text
    [(path, record)] = seen
    assert record["type"] == "batch.stop_requested" and path.startswith("events/b1/")
    assert json.loads((tmp_path / "root" / path).read_text()) == record
