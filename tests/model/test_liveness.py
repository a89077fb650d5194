"""Heartbeat liveness by the spec's formula, and the stored timestamp spelling."""

from __future__ import annotations

import datetime as dt

import pytest

from agentcoordd.model.liveness import liveness
from agentcoordd.model.timefmt import format_ts, parse_ts

UTC = dt.timezone.utc
UPDATED = dt.datetime(2026, 6, 13, 0, 40, tzinfo=UTC)
TTL = dt.timedelta(minutes=15)


def at(delta: dt.timedelta) -> dt.datetime:
    return UPDATED + delta


def beat(now: dt.datetime, updated: str = "2026-06-13T00:40:00Z", expires: str = "2026-06-13T00:55:00Z"):
    return liveness(updated, expires, now)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (at(dt.timedelta(0)), "live"),
        (at(TTL - dt.timedelta(seconds=1)), "live"),
        (at(TTL), "stale"),  # expires_at <= now
        (at(4 * TTL - dt.timedelta(seconds=1)), "stale"),
        (at(4 * TTL), "dead"),  # now >= updated_at + 4 * ttl
        (at(dt.timedelta(days=30)), "dead"),
    ],
)
def test_liveness_follows_the_spec_boundaries(now, expected):
    assert beat(now) == expected


def test_a_heartbeat_from_the_future_is_live():
    assert beat(at(-dt.timedelta(hours=1))) == "live"


@pytest.mark.parametrize("expires", ["2026-06-13T00:40:00Z", "2026-06-13T00:30:00Z"])
def test_a_ttl_of_zero_or_less_is_dead(expires):
    assert beat(at(-dt.timedelta(hours=1)), expires=expires) == "dead"


@pytest.mark.parametrize(
    ("updated", "expires"),
    [
        (None, "2026-06-13T00:55:00Z"),
        ("2026-06-13T00:40:00Z", None),
        ("yesterday", "2026-06-13T00:55:00Z"),
        ("2026-06-13T00:40:00Z", "2026-13-13T00:55:00Z"),
        ("2026-06-13T00:40:00", "2026-06-13T00:55:00Z"),  # naive: not trusted
        (1749775200, "2026-06-13T00:55:00Z"),
        ("", ""),
    ],
)
def test_unparseable_timestamps_are_unknown(updated, expires):
    assert beat(at(dt.timedelta(0)), updated, expires) == "unknown"


def test_timestamps_from_other_writers_with_offsets_and_fractions_are_understood():
    assert liveness("2026-06-13T02:40:00.5+02:00", "2026-06-13T00:55:00Z", at(dt.timedelta(minutes=1))) == "live"


def test_format_is_utc_seconds_with_z():
    moment = dt.datetime(2026, 6, 13, 2, 30, 15, 999_999, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert format_ts(moment) == "2026-06-13T00:30:15Z"


def test_parse_round_trips_the_stored_spelling():
    assert parse_ts("2026-06-13T00:30:00Z") == dt.datetime(2026, 6, 13, 0, 30, tzinfo=UTC)
    assert format_ts(parse_ts("2026-06-13T00:30:00Z")) == "2026-06-13T00:30:00Z"
