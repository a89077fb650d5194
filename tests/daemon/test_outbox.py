"""The durable outbox: fsync'd appends, idempotent redelivery, quarantine, restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcoordd.daemon.outbox import Outbox, OutboxEntry
from agentcoordd.store.base import Conflict
from agentcoordd.store.local import LocalStore

BACKEND = {"kind": "local", "root": "/tmp/x"}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def event(i: int) -> tuple[str, dict]:
    eid = f"20260101T000000.{i:06d}Z-0000000{i % 10}"
    return f"events/b1/{eid}.json", {"schema_version": 1, "event_id": eid, "batch_id": "b1", "type": "x", "at": "2026-01-01T00:00:00Z"}


async def test_entries_survive_a_restart_and_drain_once_delivered(tmp_path: Path) -> None:
    clock = Clock()
    Outbox(tmp_path, clock).append(*event(1), BACKEND)
    Outbox(tmp_path, clock).append(*event(2), BACKEND)
    reopened = Outbox(tmp_path, clock)  # a new daemon process
    assert [e.path for e in reopened.entries()] == [event(1)[0], event(2)[0]]
    store = LocalStore(tmp_path / "root")

    async def deliver(entry: OutboxEntry) -> None:
        try:
            await store.create(entry.path, entry.record)
        except Conflict:
            pass  # already_exists = delivered: create-only makes the retry idempotent

    assert await reopened.flush(deliver) == (2, 0)
    assert reopened.entries() == []
    # a second delivery of the same event is a no-op, never a duplicate
    reopened.append(*event(1), BACKEND)
    assert await reopened.flush(deliver) == (1, 0)
    assert len(list((tmp_path / "root/events/b1").glob("*.json"))) == 2


async def test_failed_delivery_backs_off_and_keeps_the_entry(tmp_path: Path) -> None:
    clock = Clock()
    box = Outbox(tmp_path, clock)
    box.append(*event(1), BACKEND)

    async def down(entry: OutboxEntry) -> None:
        raise OSError("backend unreachable")

    assert await box.flush(down) == (0, 1)
    [entry] = box.entries()
    assert entry.attempts == 1 and "unreachable" in (entry.last_error or "")
    calls = []

    async def record(entry: OutboxEntry) -> None:
        calls.append(entry)

    assert await box.flush(record) == (0, 1)  # inside its backoff window
    assert calls == []
    clock.t += 3
    assert await box.flush(record) == (1, 0)


async def test_a_corrupted_line_is_quarantined_and_never_blocks_the_rest(tmp_path: Path) -> None:
    box = Outbox(tmp_path, Clock())
    box.append(*event(1), BACKEND)
    with open(box.path, "ab") as fh:
        fh.write(b'{"path": "events/b1/x.json", "rec\n\xff\xfe garbage\n')
    box.append(*event(2), BACKEND)
    assert [e.path for e in box.entries()] == [event(1)[0], event(2)[0]]
    assert box.quarantine_path.read_bytes().count(b"\n") == 2
    assert any("quarantined 2" in w for w in box.warnings)
    assert box.depth() == 2  # quarantined once, not again


def test_outbox_refuses_to_persist_a_token(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Outbox(tmp_path).append(*event(1), {"kind": "http", "api_token": "secret"})
    assert not (tmp_path / "outbox.jsonl").exists()


def test_outbox_file_is_private(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "state")
    box.append(*event(1), BACKEND)
    assert (box.path.stat().st_mode & 0o777) == 0o600
