"""events: a batch's events after a cursor; with --follow, streamed as they arrive.

Without `follow`: one read (`coord.feed.list_events`). With it, the caller
joins the batch's shared source (daemon/feed.py): the backlog after its cursor,
then every arrival, as Progress frames `{"events": [...]}` sent with
backpressure (a slow reader delays only itself; nothing is dropped). A quiet
feed sends a keepalive frame every `KEEPALIVE` second, which is also how a
follower that went away is noticed. The reply ends the follow: exit 0 with
`matched` when an `until_type` event arrived, exit 2 with `timed_out` when the
wait budget ran out, exit 2 when the daemon stops (follow again with the last
cursor: the next daemon answers).
"""

from __future__ import annotations

from typing import Any

import anyio

from agentcoordd import protocol as p
from agentcoordd.coord import feed as use
from agentcoordd.daemon.call import Call, ClientGone
from agentcoordd.daemon.handlers.waits import budget
from agentcoordd.daemon.services import Services
from agentcoordd.model import cursor as cur
from agentcoordd.model.errors import OperationalError

KEEPALIVE = 1.0  # also how soon a follower that went away is noticed
FRAME_EVENTS = 100  # events per Progress frame (a frame stays far below the size cap)


async def handle(req: p.Events, svc: Services, call: Call) -> p.Response:
    if not req.follow:
        return await call.use_case(use.list_events, write=False, batch_id=req.batch_id,
                                   after=req.after, types=list(req.types), lane=req.lane)
    position = use.check(req.batch_id, req.after, req.types, req.lane, req.until_type)
    resolved = call.backend(write=False)
    store = svc.pool.get(resolved)
    filters = use.Filters(req.types, req.lane, req.until_type)
    seconds = budget(req)["timeout"]
    progress = call.progress
    if progress is None:  # the client left before its reply: nobody to stream to
        return call.reply({"batch_id": req.batch_id, "events": []}, p.EXIT_OPERATIONAL)

    reached = {"cursor": cur.encode(position)}

    async def follow() -> dict[str, Any]:
        deadline = None if seconds is None else anyio.current_time() + seconds
        shown_error: str | None = None
        async with svc.feed.follow(resolved.key, store, req.batch_id, position, filters) as f:
            rows = await f.backlog()
            while True:
                error = f.source.error
                if error != shown_error:
                    shown_error = error
                    await progress.send(p.Progress(message="feed", data={"error": error}))
                matched = await send(rows)
                reached["cursor"] = f.cursor
                if matched is not None:
                    return {"batch_id": req.batch_id, "cursor": f.cursor, "matched": matched,
                            "exit_code": 0}
                remaining = None if deadline is None else deadline - anyio.current_time()
                if remaining is not None and remaining <= 0:
                    return {"batch_id": req.batch_id, "cursor": f.cursor, "timed_out": True,
                            "detail": f"no {req.until_type} event" if req.until_type else
                            "the follow's time is up", "exit_code": 2}
                rows = await f.next(KEEPALIVE if remaining is None else min(KEEPALIVE, remaining))
                if not rows:
                    await progress.send(p.Progress(message="keepalive", data={"cursor": f.cursor}))

    async def send(rows: list[use.Event]) -> use.Event | None:
        """Stream rows up to the first that ends the follow (returned)."""
        end = next((i for i, row in enumerate(rows) if filters.ends(row)), None)
        if end is not None:
            rows = rows[:end + 1]
        for start in range(0, len(rows), FRAME_EVENTS):
            await progress.send(p.Progress(message="events",
                                           data={"events": rows[start:start + FRAME_EVENTS]}))
        return None if end is None else rows[end]

    try:
        payload = await svc.pollers.run(follow())
    except ClientGone:
        return call.reply({"batch_id": req.batch_id, "gone": True}, p.EXIT_OPERATIONAL)
    except OperationalError as exc:  # the daemon is stopping (Pollers): resume from `cursor`
        return p.Response(exit_code=p.EXIT_OPERATIONAL, error=exc.message, warnings=call.warnings,
                          payload={"batch_id": req.batch_id, "stopping": True, **reached})
    return call.reply(payload)
