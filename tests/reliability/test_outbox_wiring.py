"""The durable outbox wired into the daemon: queue-on-failure, listing, flush,
restarts, and depth/age in `lanes` and `doctor --daemon`."""

from __future__ import annotations

import json
import socket

from agentcoordd.daemon.outbox import Outbox
from integration.helpers import Daemon

from .scenarios import local_descriptor, wait_until


def _dead_url() -> str:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_queue_on_failure_exits_0_with_action_queued_and_a_warning(daemon: Daemon) -> None:
    url = _dead_url()
    env = {"AGENT_COORD_API_URL": url, "AGENT_COORD_API_TOKEN": "acm_secret-token"}
    result = daemon.ctl("--timeout", "10", "record-event", "--batch-id", "b1", "--type", "note",
                        "--queue-on-failure", "--json", env=env, unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["action"] == "queued" and payload["path"].startswith("events/b1/")
    assert "warning: the backend did not take the event: " in result.stderr.decode()
    raw = (daemon.state_dir / "outbox.jsonl").read_text()
    assert payload["event"]["event_id"] in raw and "acm_secret-token" not in raw  # never a token

    listing = json.loads(daemon.ctl("outbox", "--json").stdout)
    assert listing["depth"] == 1
    row = listing["entries"][0]
    assert (row["path"], row["batch_id"], row["type"]) == (payload["path"], "b1", "note")
    text = daemon.ctl("outbox").stdout.decode()
    assert payload["path"] in text and "1 queued" in text
    flushed = daemon.ctl("outbox", "flush")
    assert flushed.returncode == 2 and "1 still queued" in flushed.stderr.decode()


def test_without_queue_on_failure_the_event_fails_with_exit_2(daemon: Daemon) -> None:
    env = {"AGENT_COORD_API_URL": _dead_url(), "AGENT_COORD_API_TOKEN": "acm_x"}
    result = daemon.ctl("--timeout", "10", "record-event", "--batch-id", "b1", "--type", "note",
                        env=env, unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 2
    assert not (daemon.state_dir / "outbox.jsonl").exists()


def test_queued_events_survive_a_restart_and_are_delivered_exactly_once(daemon: Daemon) -> None:
    daemon.stop()
    box = Outbox(daemon.state_dir)
    record = {"schema_version": 1, "event_id": "e-restart", "batch_id": "b1", "type": "note",
              "at": "2024-01-01T00:00:00Z"}
    box.append("events/b1/e-restart.json", record, local_descriptor(daemon))
    box.append("events/b1/e-restart.json", record, local_descriptor(daemon))  # a retried append
    daemon.start()
    assert wait_until(lambda: Outbox(daemon.state_dir).depth() == 0, 10.0)
    assert json.loads((daemon.root / "events/b1/e-restart.json").read_text())["event_id"] == "e-restart"
    assert sorted(p.name for p in (daemon.root / "events/b1").glob("*.json")) == ["e-restart.json"]


def test_depth_and_oldest_age_show_in_lanes_and_doctor(daemon: Daemon) -> None:
    Outbox(daemon.state_dir).append("events/b1/e-x.json", {"event_id": "e-x"}, {
        "key": "http:http://127.0.0.1:9", "kind": "http", "location": "http://127.0.0.1:9"})
    lanes = json.loads(daemon.ctl("lanes", "--json").stdout)["summary"]
    assert lanes["outbox_depth"] == 1 and lanes["outbox_oldest_age"] >= 0
    assert "outbox: 1 queued" in lanes["status"]
    assert "outbox: 1 queued" in daemon.ctl("lanes").stdout.decode()
    doctor = json.loads(daemon.ctl("doctor", "--json", "--daemon").stdout)["daemon"]["outbox"]
    assert doctor["depth"] == 1 and doctor["oldest_age_seconds"] >= 0


def test_a_corrupt_outbox_line_is_quarantined_and_the_rest_delivered(daemon: Daemon) -> None:
    good = Outbox(daemon.state_dir)
    with open(good.path, "ab") as fh:
        fh.write(b'{"path": "events/b1/torn.json", "rec')  # torn by a crash, no newline
    good.append("events/b1/e-after.json", {"schema_version": 1, "event_id": "e-after",
                                            "batch_id": "b1", "type": "note",
                                            "at": "2024-01-01T00:00:00Z"}, local_descriptor(daemon))
    assert wait_until(lambda: (daemon.root / "events/b1/e-after.json").exists(), 10.0)
    assert good.quarantine_path.read_bytes().startswith(b'{"path": "events/b1/torn.json"')


