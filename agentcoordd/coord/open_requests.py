"""Open requests: help_requested / escalation_requested events without an answer
(help_answered / escalation_answered with `reply_to` = their event_id, written
through the daemon's `answer`: coord.trust), with their age — what status, health
and the dashboard show. Answering and waiting live in coord.answers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from agentcoordd.coord import trust
from agentcoordd.coord.context import Ctx
from agentcoordd.model.timefmt import parse_ts
from agentcoordd.model.typed_events import ANSWER_TYPES
from agentcoordd.store.base import StoreError
from agentcoordd.store.cache import scan

ANSWERED_TYPES = frozenset(ANSWER_TYPES.values())
# What an open request shows of its event.
REQUEST_KEYS = ("event_id", "batch_id", "type", "at", "lane", "agent_id", "repo", "target",
                "reason", "from_route", "to_route", "evidence", "message", "machine_id")


def pick(event: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: event[k] for k in keys if event.get(k) is not None}


def request_digest(path: str, data: Any) -> dict[str, Any]:
    """What open_requests needs of one event (empty for every other event: a scan
    caches empty digests, never None)."""
    if not isinstance(data, dict):
        return {}
    kind = data.get("type")
    batch = path.split("/")[1] if path.count("/") >= 2 else None
    if kind in ANSWER_TYPES:
        out = pick(data, REQUEST_KEYS)
        out.setdefault("event_id", path.rsplit("/", 1)[-1].removesuffix(".json"))
        out.setdefault("batch_id", batch)
        return out
    if kind in ANSWERED_TYPES:
        return {"batch_id": data.get("batch_id") or batch, "type": kind,
                "reply_to": data.get("reply_to"), trust.STAMP_FIELD: data.get(trust.STAMP_FIELD)}
    return {}


def open_requests(events: Iterable[dict[str, Any]], now: dt.datetime) -> list[dict[str, Any]]:
    """Requests without an answer among `events` (one batch's, or several), oldest
    first, each with `age_seconds` (None when its `at` is not a time). Only an answer
    the daemon stamped counts (coord.trust): one written around it leaves the request open."""
    rows = list(events)
    answered = {(e.get("batch_id"), e.get("type"), e.get("reply_to")) for e in rows
                if e.get("type") in ANSWERED_TYPES and trust.stamped(e)}
    found = []
    for event in rows:
        kind = event.get("type")
        if kind not in ANSWER_TYPES:
            continue
        if (event.get("batch_id"), ANSWER_TYPES[kind], event.get("event_id")) in answered:
            continue
        at = parse_ts(event.get("at"))
        age = round((now - at).total_seconds(), 3) if at is not None else None
        found.append({**pick(event, REQUEST_KEYS), "age_seconds": age})
    found.sort(key=lambda r: (r["age_seconds"] is None, -(r["age_seconds"] or 0.0), r.get("event_id", "")))
    return found


async def batch_open_requests(ctx: Ctx, prefix: str, events: list[dict[str, Any]] | None,
                              now: dt.datetime) -> list[dict[str, Any]]:
    """A batch's open requests: from `events` when they are all of the batch's events,
    else from a scan of small digests (cached per file on local roots). A listing that
    fails leaves the list empty: status reports that listing's trouble itself."""
    if events is None:
        try:
            found = await scan(ctx.store, prefix, request_digest, "answers.requests")
        except (StoreError, OSError):
            return []
        events = [row for _, row in found.rows if row]
    return open_requests(events, now)
