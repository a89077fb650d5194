"""The feed's cursor: derived from the event alone, order-preserving, hostile input refused."""

from __future__ import annotations

import pytest

from agentcoordd.model import cursor as cur
from agentcoordd.model.errors import UsageError


def test_a_cursor_round_trips_the_events_key() -> None:
    event = {"event_id": "20260101T000000.000001Z-abcd1234", "at": "2026-01-01T01:00:00+01:00"}
    assert cur.decode(cur.encode(cur.key(event))) == ("2026-01-01T00:00:00.000000Z", event["event_id"])


def test_events_sort_by_utc_time_then_id_and_jsonl_lines_by_path() -> None:
    a = {"event_id": "b", "at": "2026-01-01T00:00:00Z"}
    b = {"event_id": "a", "at": "2026-01-01T00:00:01Z"}
    line = {"path": "history/x.jsonl:3", "timestamp": "2026-01-01T00:00:01Z"}
    assert sorted([line, b, a], key=cur.key) == [a, b, line]
    assert cur.ident(line) == "history/x.jsonl:3"


def test_the_same_event_gives_the_same_cursor_in_any_process() -> None:
    event = {"event_id": "x", "at": "2026-01-01T00:00:00Z", "type": "note"}
    assert cur.encode(cur.key(dict(event))) == cur.encode(cur.key(event))
    assert cur.encode(cur.key(event)).startswith("c1.")


@pytest.mark.parametrize("text", ["", "garbage", "c1.", "c1.!!", "c1.bnVsbA", "c1.WzEsMl0",
                                  "c1.WyJhIl0", "c1." + "A" * 5000, "c2.WyJhIiwiYiJd"])
def test_anything_else_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as refused:
        cur.decode(text)
    assert refused.value.message.startswith("invalid --after cursor")
