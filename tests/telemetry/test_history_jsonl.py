"""Local JSON Lines history: read-only, merged with Store events, bad lines reported."""

from __future__ import annotations

from agentcoordd.store import history
from agentcoordd.store.base import Capabilities

import os
from pathlib import Path

import pytest

from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import record_event
from agentcoordd.store.local import LocalStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def ctx(root: Path, clock) -> Ctx:  # noqa: ANN001
    return Ctx(LocalStore(root), clock)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_malformed_lines_are_reported_with_file_and_line_and_skipped(ctx: Ctx, root: Path) -> None:
    _write(root, "history/run.jsonl", "\n".join([
        '{"type": "lane.started", "batch_id": "b1", "at": "2026-06-12T10:00:00Z", "event_id": "e1"}',
        '{"type": "continued", "batch_id": "b1"',  # truncated write
        "[1, 2]",
        '{"type": "blocked", "batch_id": "b1"}',  # no at/timestamp
        '{"type": "ready", "batch_id": "b1", "at": "yesterday"}',
        "",
        '{"type": "done", "batch_id": "b1", "timestamp": "2026-06-12T11:00:00Z", "event_id": "e2"}',
    ]) + "\n")
    _write(root, "events/bad.jsonl", "\xff\n")

    result = await telemetry.history(ctx)

    assert [e["type"] for e in result["events"]] == ["lane.started", "done"]
    assert [(p["file"], p.get("line")) for p in result["problems"]] == [
        ("events/bad.jsonl", 1),
        ("history/run.jsonl", 2),
        ("history/run.jsonl", 3),
        ("history/run.jsonl", 4),
        ("history/run.jsonl", 5),
    ]
    assert result["exit_code"] == 0
    assert any("history/run.jsonl:2" in w for w in ctx.warnings)


async def test_jsonl_and_store_events_merge_by_time_then_event_id(ctx: Ctx, root: Path, clock) -> None:  # noqa: ANN001
    await record_event(ctx, batch_id="b1", type="lane.started")  # at 2026-06-13T00:30:00Z
    _write(root, "events/batches/b1.jsonl",
           '{"type": "batch.created", "timestamp": "2026-06-13T00:00:00Z", "event_id": "z"}\n'
           '{"type": "continued", "at": "2026-06-13T01:00:00+01:00", "event_id": "b"}\n'
           '{"type": "blocked", "at": "2026-06-13T00:00:00Z", "event_id": "a"}\n')
    _write(root, "events/other.jsonl", '{"type": "done", "batch_id": "b2", "at": "2026-06-13T00:10:00Z"}\n')

    result = await telemetry.history(ctx, batch_id="b1")

    events = result["events"]
    assert [(e["type"], e["source"]) for e in events] == [
        ("blocked", "jsonl"),
        ("continued", "jsonl"),  # 01:00+01:00 == 00:00Z, event_id "b" after "a"
        ("batch.created", "jsonl"),  # timestamp-only, event_id "z"
        ("lane.started", "store"),
    ]
    assert {e["batch_id"] for e in events} == {"b1"}  # file name supplies batch_id
    assert events[2]["at"] == "2026-06-13T00:00:00Z"
    assert events[0]["path"] == "events/batches/b1.jsonl:3"


async def test_store_copy_wins_when_the_same_event_is_in_both(ctx: Ctx, root: Path) -> None:
    written = await record_event(ctx, batch_id="b1", type="ready")
    event = written["event"]
    _write(root, "history/mirror.jsonl",
           f'{{"type": "ready", "batch_id": "b1", "event_id": "{event["event_id"]}", "at": "{event["at"]}"}}\n')

    result = await telemetry.history(ctx, batch_id="b1")

    assert [e["source"] for e in result["events"]] == ["store"]


async def test_reading_history_never_writes(ctx: Ctx, root: Path) -> None:
    _write(root, "history/h.jsonl", '{"type": "x", "batch_id": "b", "at": "2026-06-13T00:00:00Z"}\nbad\n')
    before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*"))

    await telemetry.history(ctx)
    await telemetry.stop_state(ctx, "b")

    assert sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*")) == before


async def test_symlinked_or_oversized_files_are_reported_not_followed(ctx: Ctx, root: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    outside = tmp_path / "secret.jsonl"
    outside.write_text('{"type": "x", "batch_id": "b", "at": "2026-06-13T00:00:00Z"}\n')
    (root / "history").mkdir()
    os.symlink(outside, root / "history" / "link.jsonl")
    _write(root, "events/big.jsonl", '{"type": "x", "batch_id": "b", "at": "2026-06-13T00:00:00Z"}\n' * 4)
    monkeypatch.setattr(history, "MAX_JSONL_BYTES", 64)

    result = await telemetry.history(ctx)

    assert result["events"] == []
    reasons = {p["file"]: p["reason"] for p in result["problems"]}
    assert "symlink" in reasons["history/link.jsonl"]
    assert "too large" in reasons["events/big.jsonl"]


async def test_remote_stores_have_no_jsonl_history(clock) -> None:  # noqa: ANN001
    class Remote:  # not a local root: JSONL is local-only
        capabilities = Capabilities()  # a plain Store: every read goes through it
        name = "remote"

    assert telemetry.local_root(Remote()) is None


async def test_a_stop_request_in_jsonl_is_seen(ctx: Ctx, root: Path) -> None:
    _write(root, "events/batches/b9.jsonl",
           '{"type": "batch.stop_requested", "timestamp": "2026-06-13T00:05:00Z", "message": "m"}\n')

    assert await telemetry.stop_requested(ctx, "b9") is True
