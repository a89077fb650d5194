"""Timestamps and ids: the spec's exact spellings, from an injected `now`."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

UTC = dt.timezone.utc
TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)  # the last stamp four digits can spell


def expiry(now: dt.datetime, seconds: int) -> str:
    """`now + seconds`, stamped; a lease past year 9999 expires at LATEST (agent-coord writes
    a five-digit year no RFC 3339 reader takes)."""
    try:
        return format_ts(min(now + dt.timedelta(seconds=seconds), LATEST))
    except OverflowError:
        return format_ts(LATEST)


def format_ts(moment: dt.datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SSZ` in UTC, second precision (the stored spelling)."""
    return moment.astimezone(UTC).strftime(TS_FORMAT)


def parse_ts(value: object) -> dt.datetime | None:
    """Parse an RFC 3339 timestamp; None when it is missing or unparseable.

    Records we write use the strict second-precision `Z` form, but records from
    other writers may carry fractions or offsets; a naive time is not trusted.
    """
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def event_time(event: dict[str, Any]) -> str:
    """An event's `at`, else `timestamp`, as sortable UTC text; "" when neither parses."""
    for name in ("at", "timestamp"):
        moment = parse_ts(event.get(name))
        if moment is not None:
            return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return ""


def is_rfc3339(value: object) -> bool:
    """True for a full RFC 3339 date-time (date, time and zone all present)."""
    return isinstance(value, str) and "T" in value.upper() and parse_ts(value) is not None


def new_event_id(moment: dt.datetime, token: str | None = None) -> str:
    """Ordinary event id: `YYYYMMDDTHHMMSS.ffffffZ-<8 hex>`, time-sortable."""
    suffix = token if token is not None else secrets.token_hex(4)
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ") + "-" + suffix
