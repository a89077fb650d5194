"""Requests that get answers: `answer`, waiting for an answer, open requests.

A help_requested or escalation_requested event is answered by an event of type
help_answered / escalation_answered (model.typed_events.ANSWER_TYPES) whose
`reply_to` is the request's event_id. The request is read directly by its path
(`events/<batch>/<event-id>.json`); its type decides the answer's type.

A request may be answered more than once (each answer is an ordinary,
immutable event; `answer` warns that one exists already): waiters and status
take the earliest answer, by (at, event_id), among those `answer` wrote — the
daemon stamps each (coord.trust, `written_by`: its machine and agent id) — and
not stamped before its request (beyond the clock bound). An answer record
without the stamp (written straight to the backend) is shown, never taken.

Finding answers lists the batch's events, but only from shortly before the
request: event ids start with their UTC time, and a listing returns paths after
a cursor, so the listing starts at the request's `at` minus `CLOCK_SKEW`
(another machine's clock may run behind), rounded down to the hour — requests
of the same hour share one cursor, so the daemon's shared reads
(`daemon.recent`) serve all their waiters from one listing per tick.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentcoordd.coord import trust
from agentcoordd.coord.common import text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import typed_payload, write_event
from agentcoordd.coord.open_requests import REQUEST_KEYS as _REQUEST_KEYS, pick as _pick
from agentcoordd.coord.waits import nothing_to_wait_for, poll_until, unknown_batch
from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.model.timefmt import new_event_id, parse_ts
from agentcoordd.model.typed_events import ANSWER_TYPES
from agentcoordd.store.base import Entry, UnreadableEntries

CLOCK_SKEW = dt.timedelta(minutes=5)
_ANSWER_KEYS = ("event_id", "batch_id", "type", "at", "reply_to", "agent_id", "message",
                "decision", "machine_id", "session_id", trust.STAMP_FIELD)


async def read_request(ctx: Ctx, batch_id: str, event_id: str) -> dict[str, Any]:
    """The request event `event_id` of `batch_id`; a usage error when there is none
    or it is not a help_requested / escalation_requested event."""
    ids.batch_id(batch_id)
    path = ids.event_path(batch_id, text_field("event_id", event_id, required=True) or "")
    current = await ctx.store.get(path)
    if current is None:
        raise UsageError(f"no event {event_id} in batch {batch_id}")
    data = current.data if isinstance(current.data, dict) else {}
    kind = data.get("type")
    if kind not in ANSWER_TYPES:
        raise UsageError(f"event {event_id} of batch {batch_id} is {kind!r}, not a "
                         "help_requested or escalation_requested event; nothing to answer")
    return {**data, "event_id": event_id, "batch_id": batch_id}


def listing_cursor(batch_id: str, request: dict[str, Any]) -> str | None:
    """Where a search for the request's answers starts (see the module docstring);
    None (the whole batch) when the request has no usable time."""
    at = parse_ts(request.get("at"))
    if at is None:
        return None
    start = (at - CLOCK_SKEW).astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    return ids.event_path(batch_id, new_event_id(start, "00000000"))


async def _events_after(ctx: Ctx, prefix: str, cursor: str | None) -> list[Entry]:
    entries: list[Entry] = []
    while True:
        try:
            page = await ctx.store.list(prefix, None, cursor)
        except UnreadableEntries as exc:  # one torn record never hides an answer
            page = exc.page
        entries.extend(page.entries)
        if not page.next_cursor:
            return entries
        cursor = page.next_cursor


def _answer_key(event: dict[str, Any]) -> tuple[float, str]:
    at = parse_ts(event.get("at"))
    return (at.timestamp() if at else float("-inf"), str(event.get("event_id") or ""))


def is_answer(event: Any, request: dict[str, Any]) -> bool:
    return (isinstance(event, dict) and event.get("reply_to") == request.get("event_id")
            and event.get("type") == ANSWER_TYPES.get(str(request.get("type"))))


async def answers_to(ctx: Ctx, batch_id: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's answers, earliest first."""
    entries = await _events_after(ctx, ids.events_prefix(batch_id), listing_cursor(batch_id, request))
    return sorted((e.data for e in entries if is_answer(e.data, request)), key=_answer_key)


def taken(answer: dict[str, Any], request: dict[str, Any]) -> bool:
    """An answer waiters take: written by the daemon's `answer` (its stamp), and not
    dated before its request by more than another machine's clock may lag."""
    if not trust.stamped(answer):
        return False
    asked, answered = parse_ts(request.get("at")), parse_ts(answer.get("at"))
    return asked is None or (answered is not None and answered >= asked - CLOCK_SKEW)


async def answer(ctx: Ctx, *, batch_id: str, to_event: str, message: str,
                 decision: str | None = None, agent_id: str | None = None) -> dict[str, Any]:
    """`answer`: record the answer to request `to_event` of `batch_id`."""
    text_field("message", message, required=True)
    text_field("agent_id", agent_id)
    request = await read_request(ctx, batch_id, to_event)
    answer_type = ANSWER_TYPES[request["type"]]
    typed = {"reply_to": to_event, **({"decision": decision} if decision is not None else {})}
    fields: dict[str, Any] = {"type": answer_type}
    if agent_id is not None:
        fields["agent_id"] = agent_id
    fields["message"] = message
    fields.update(typed_payload(answer_type, typed, message))
    fields[trust.STAMP_FIELD] = trust.stamp(ctx.identity, agent_id)  # its author, as the daemon saw it
    earlier = [a for a in await answers_to(ctx, batch_id, request) if taken(a, request)]
    if earlier:
        ctx.warn(f"{request['type']} {to_event} already has {len(earlier)} answer(s); this one "
                 "is recorded too (waiters take the earliest)")
    written = await write_event(ctx, batch_id, fields, contract=True)
    return {"action": "answered", "request": _pick(request, _REQUEST_KEYS), **written}


async def answered_state(ctx: Ctx, batch_id: str, request: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    every = await answers_to(ctx, batch_id, request)
    found = [a for a in every if taken(a, request)]
    state: dict[str, Any] = {"batch_id": batch_id, "event_id": request["event_id"],
                             "request": _pick(request, _REQUEST_KEYS), "answers": len(found)}
    ignored = [a for a in every if not taken(a, request)]
    note = ""
    if ignored:  # shown, never taken
        state["not_taken"] = [_pick(a, _ANSWER_KEYS) for a in ignored]
        note = (f" ({len(ignored)} answer record(s) not taken — not written through `agentcoordctl "
                f"answer`, or dated before the request: "
                + ", ".join(str(a.get("event_id")) for a in ignored) + ")")
    label = f"{request['type']} {request['event_id']} of batch {batch_id}"
    if not found:
        return False, {**state, "detail": f"no answer yet to {label}{note}"}
    first = _pick(found[0], _ANSWER_KEYS)
    by = f" by {first['agent_id']}" if first.get("agent_id") else ""
    return True, {**state, "answer": first,
                  "detail": f"{label} answered{by}: {first.get('message', '')}"}


async def wait_until_answered(ctx: Ctx, *, batch_id: str, event_id: str, poll_seconds: float = 1.0,
                              timeout: float | None = None, sleep: Any = None) -> dict[str, Any]:
    """`wait --until-answered`: exit_code 0 with the earliest answer, 2 with timed_out.
    The request is read once (events are immutable); each poll lists what came after."""
    ids.batch_id(batch_id)
    why = await unknown_batch(ctx, batch_id)
    if why is not None:  # nothing to wait for: said at once (exit 2), as every wait does
        return nothing_to_wait_for(batch_id, why, event_id=event_id)
    request = await read_request(ctx, batch_id, event_id)
    return await poll_until(lambda: answered_state(ctx, batch_id, request),
                            poll_seconds=poll_seconds, timeout=timeout, sleep=sleep)
