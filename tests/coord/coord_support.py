"""Helpers shared by the claim, heartbeat, event and closeout tests."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from agentcoordd.model.timefmt import format_ts

# Hostile values every identifier is tried with: each must be a one-line usage
# error (exit 1) that leaves no file behind.
# Text no record may hold (too long, NUL, not UTF-8): refused wherever it is passed.
UNSTORABLE = [
    pytest.param("a" * 10_240, id="10KB"),
    pytest.param("a\x00b", id="NUL"),
    pytest.param("a\udcffb", id="surrogate"),
]
# Not a usable path segment, but fine as payload text (agent-coord stores it verbatim).
ODD_TEXT = [
    pytest.param("../x", id="dotdot"),
    pytest.param("a/../../b", id="traversal"),
    pytest.param("\u00e9t\u00e9", id="unicode"),
]
HOSTILE = [
    pytest.param("../x", id="dotdot"),
    pytest.param("a/../../b", id="traversal"),
    pytest.param("", id="empty"),
    pytest.param("a" * 10_240, id="10KB"),
    pytest.param("a\x00b", id="NUL"),
    pytest.param("a\udcffb", id="surrogate"),
    pytest.param("\u00e9t\u00e9", id="unicode"),
]


def read(root: Path, rel: str) -> dict:
    return json.loads((root / rel).read_text())


def batch_events(root: Path, batch: str = "b1") -> list[dict]:
    directory = root / "events" / batch
    events = [json.loads(p.read_text()) for p in directory.glob("*.json")] if directory.is_dir() else []
    return sorted(events, key=lambda e: e["event_id"])


def all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def token(clock, **delta) -> int:
    """The fencing token of a grant made at the clock's time (+ delta): its microseconds."""
    return int((clock.now() + dt.timedelta(**delta)).timestamp() * 1_000_000)


def ts(clock, **delta) -> str:
    return format_ts(clock.now() + dt.timedelta(**delta))
