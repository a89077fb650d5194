"""Heartbeat liveness, derived from timestamps only (spec: Heartbeat Liveness)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from agentcoordd.model.timefmt import parse_ts

Liveness = Literal["live", "stale", "dead", "unknown"]
DEAD_AFTER_TTL_MULTIPLIER = 4


_ZERO = dt.timedelta(0)


def liveness(updated_at: object, expires_at: object, now: dt.datetime) -> Liveness:
    """live before expiry, stale until updated_at + 4*ttl, dead after.

    ttl is expires_at - updated_at; a ttl <= 0 is dead (a heartbeat that never
    promised to be alive), unparseable timestamps are unknown.
    """
    return liveness_of(parse_ts(updated_at), parse_ts(expires_at), now)


def liveness_of(updated: dt.datetime | None, expires: dt.datetime | None,
                now: dt.datetime) -> Liveness:
    """The rule over already-parsed timestamps (projections parse once, judge per call)."""
    if updated is None or expires is None:
        return "unknown"
    ttl = expires - updated
    if ttl <= _ZERO:
        return "dead"
    if now < expires:
        return "live"
    if now < updated + DEAD_AFTER_TTL_MULTIPLIER * ttl:
        return "stale"
    return "dead"
