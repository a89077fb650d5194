"""batch stop / batch stopped through the real daemon, and the notice on the next ctl call."""

from __future__ import annotations

import json
from pathlib import Path

from integration.helpers import Daemon

NOTICE = "agentcoord: batch b1 has a stop request"


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


def events_of(root: Path, batch: str, kind: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in sorted((root / "events" / batch).glob("*.json"))]
    return [e for e in found if e.get("type") == kind]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for family in ("claims", "heartbeats", "batches") for p in (root / family).rglob("*.json")}


def test_batch_stop_records_one_event_and_touches_no_claim_heartbeat_or_manifest(
        daemon: Daemon, batch: dict) -> None:
    before = snapshot(daemon.root)
    result = daemon.ctl("batch", "stop", "--batch-id", "b1", "--message", "restart smaller",
                        env={"AGENT_COORD_MACHINE_ID": "ws-1"})
    assert result.returncode == 0, err(result)
    assert out(result).startswith("recorded batch.stop_requested for batch b1 (")
    [event] = events_of(daemon.root, "b1", "batch.stop_requested")
    assert (event["status"], event["message"], event["repo"], event["machine_id"]) == (
        "stop_requested", "restart smaller", "acme/widgets", "ws-1")
    assert snapshot(daemon.root) == before


def test_batch_stop_json_prints_the_written_event(daemon: Daemon, batch: dict) -> None:
    result = daemon.ctl("batch", "stop", "--batch-id", "b1", "--json")
    assert result.returncode == 0, err(result)
    payload = json.loads(out(result))
    assert payload["action"] == "recorded" and payload["event"]["type"] == "batch.stop_requested"


def test_a_heartbeat_before_any_stop_request_has_no_notice(daemon: Daemon, batch: dict) -> None:
    result = daemon.ctl("heartbeat", "--agent-id", "agent-a", "--json")
    assert result.returncode == 0, err(result)
    assert NOTICE not in err(result)
    assert "stop_requested" not in json.loads(out(result))


def test_next_heartbeat_prints_the_notice_and_carries_stop_requested_in_json(
        daemon: Daemon, batch: dict) -> None:
    daemon.ctl("batch", "stop", "--batch-id", "b1", "--message", "restart smaller")
    # No --batch-id: the stored heartbeat names the batch.
    result = daemon.ctl("heartbeat", "--agent-id", "agent-a", "--json")
    assert result.returncode == 0, err(result)
    [line] = [line for line in err(result).splitlines() if line.startswith(NOTICE)]
    assert "(restart smaller)" in line and "stop claiming new work" in line
    payload = json.loads(out(result))
    assert payload["stop_requested"] is True
    assert payload["stop"]["message"] == "restart smaller"


def test_text_output_keeps_its_shape_and_the_notice_goes_to_stderr(daemon: Daemon, batch: dict) -> None:
    daemon.ctl("batch", "stop", "--batch-id", "b1")
    result = daemon.ctl("heartbeat", "--agent-id", "agent-a")
    assert result.returncode == 0
    assert out(result).startswith("heartbeat agent-a ") and NOTICE not in out(result)
    assert NOTICE in err(result)


def test_claim_release_and_record_event_for_the_batch_carry_the_stop(daemon: Daemon, batch: dict) -> None:
    daemon.ctl("batch", "stop", "--batch-id", "b1")
    claim = daemon.ctl("claim", "--agent-id", "agent-b", "--repo", "acme/widgets", "--target", "2",
                       "--batch-id", "b1", "--json")
    release = daemon.ctl("release", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                         "--json")
    event = daemon.ctl("record-event", "--batch-id", "b1", "--type", "blocked", "--json")
    for result in (claim, release, event):
        assert result.returncode == 0, err(result)
        assert NOTICE in err(result)
        assert json.loads(out(result))["stop_requested"] is True


def test_a_lane_of_another_batch_gets_no_notice(daemon: Daemon, batch: dict) -> None:
    daemon.ctl("batch", "stop", "--batch-id", "b1")
    result = daemon.ctl("heartbeat", "--agent-id", "agent-c", "--batch-id", "b2", "--json")
    assert result.returncode == 0
    assert "has a stop request" not in err(result)
    assert "stop_requested" not in json.loads(out(result))


def test_a_stop_request_from_a_dashboard_jsonl_file_is_honoured(daemon: Daemon, batch: dict) -> None:
    history = daemon.root / "events" / "batches"
    history.mkdir(parents=True)
    (history / "b1.jsonl").write_text(json.dumps({
        "schema_version": 1, "event_id": "b1:stop-requested:2026-06-19T20:05:00Z",
        "type": "batch.stop_requested", "batch_id": "b1", "status": "stop_requested",
        "timestamp": "2026-06-19T20:05:00Z", "message": "from the dashboard"}) + "\n")
    result = daemon.ctl("heartbeat", "--agent-id", "agent-a", "--json")
    assert "(from the dashboard)" in err(result)
    assert json.loads(out(result))["stop"]["requested_at"] == "2026-06-19T20:05:00Z"


def test_batch_stopped_records_the_event_and_the_stop_state_says_stopped(daemon: Daemon, batch: dict) -> None:
    daemon.ctl("batch", "stop", "--batch-id", "b1")
    result = daemon.ctl("batch", "stopped", "--batch-id", "b1", "--message", "all lanes idle")
    assert result.returncode == 0, err(result)
    assert out(result).startswith("recorded batch.stopped for batch b1 (")
    [event] = events_of(daemon.root, "b1", "batch.stopped")
    assert (event["status"], event["message"]) == ("stopped", "all lanes idle")
    payload = json.loads(out(daemon.ctl("heartbeat", "--agent-id", "agent-a", "--json")))
    assert payload["stop"]["stopped"] is True


def test_batch_stop_needs_a_batch_id_and_refuses_an_unsafe_one(daemon: Daemon) -> None:
    missing = daemon.ctl("batch", "stop")
    unsafe = daemon.ctl("batch", "stop", "--batch-id", "../x")
    assert missing.returncode == 1
    assert unsafe.returncode == 1 and err(unsafe).strip()
    assert not (daemon.root / "events").exists()
