"""The event feed of one batch: its events in (at, ident) order, after a cursor.

`read_batch` is one read of the batch's whole history — Store events under
`events/<batch>/` merged with the local root's JSON Lines history
(`telemetry.history`, the telemetry contract's read path). `events_after`
lists it after a cursor with the command's filters; `row` is what a reader
prints (the event plus its `cursor`). The daemon's feed (daemon/feed.py) calls
`read_batch` once per change for all followers of a batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Ctx
from agentcoordd.model import cursor as cur
from agentcoordd.model import ids

Event = dict[str, Any]


class Filters:
    """`--type T`… and `--lane L`; `--until-type U` ends a follow at the first U
    event of the lane (printed even when --type leaves U out)."""

    def __init__(self, types: Iterable[str] = (), lane: str | None = None,
                 until_type: str | None = None) -> None:
        self.types = frozenset(types)
        self.lane = lane
        self.until_type = until_type

    def ends(self, event: Event) -> bool:
        return (self.until_type is not None and event.get("type") == self.until_type
                and (self.lane is None or event.get("lane") == self.lane))

    def shows(self, event: Event) -> bool:
        if self.lane is not None and event.get("lane") != self.lane:
            return False
        return not self.types or event.get("type") in self.types or self.ends(event)


async def read_batch(ctx: Ctx, batch_id: str) -> tuple[list[Event], str | None]:
    """Every readable event of the batch, oldest first, and why the read failed (the
    listing itself). An event record that cannot be read is left out with a warning
    naming it: one bad record never stops the feed of its batch."""
    found = await telemetry.history(ctx, batch_id=batch_id)
    events = sorted(found["events"], key=cur.key)
    unreadable = [item["path"] for item in found.get("unreadable") or []]
    if unreadable:
        ctx.warn(f"unreadable event records left out: {', '.join(unreadable)}")
    return events, found.get("error")


def row(event: Event, position: cur.Key, late: bool = False) -> Event:
    out = {**event, "cursor": cur.encode(position)}
    if late:
        out["late"] = True
    return out


def events_after(events: list[Event], after: cur.Key, filters: Filters) -> tuple[list[Event], cur.Key]:
    """The rows after `after` that `filters` show, and the position reached (the
    last event's, shown or not)."""
    out = []
    position = after
    for event in events:
        k = cur.key(event)
        if k <= after:
            continue
        position = k
        if filters.shows(event):
            out.append(row(event, k))
    return out, position


def check(batch_id: str, after: str | None, types: Iterable[str], lane: str | None,
          until_type: str | None) -> cur.Key:
    """Usage errors before anything is read; the position `after` names."""
    ids.batch_id(batch_id)
    for kind in [*types, *([until_type] if until_type is not None else [])]:
        ids.event_type(kind)
    if lane is not None:
        ids.lane_name(lane)
    return cur.START if not after else cur.decode(after)  # "": from the start (an unset $CURSOR)


async def list_events(ctx: Ctx, *, batch_id: str, after: str | None = None,
                      types: Iterable[str] = (), lane: str | None = None) -> dict[str, Any]:
    """`events` without --follow: one read, the rows after the cursor."""
    position = check(batch_id, after, types, lane, None)
    events, error = await read_batch(ctx, batch_id)
    rows, reached = events_after(events, position, Filters(types, lane))
    out: dict[str, Any] = {"batch_id": batch_id, "events": rows, "cursor": cur.encode(reached)}
    if error:
        out.update(error=error, exit_code=2, exit_error=f"events of {batch_id}: {error}")
    return out
