"""outbox / outbox flush: events waiting for their backend and notifications waiting
for their webhook/command; retry them now, with the caller's own token for the
entries queued for its backend."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.daemon import backends
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services
from agentcoordd.model.errors import CoordError


def listing(svc: Services) -> dict:
    """Events and notifications in one table (`kind`); `notifications` summarizes the latter."""
    payload = svc.outbox.listing()
    notifications = svc.notifier.summary()
    payload["entries"] = payload["entries"] + svc.notifier.rows()
    payload["notifications"] = notifications
    return payload


async def handle(req: p.OutboxList, svc: Services, call: Call) -> p.Response:
    return call.reply(listing(svc))


async def handle_flush(req: p.OutboxFlush, svc: Services, call: Call) -> p.Response:
    try:
        svc.credentials.learn(backends.resolve(req.selection, req.caller.env, req.caller.cwd))
    except CoordError:
        pass  # no usable selection in the caller's environment: flush with what is known
    delivered, remaining = await svc.outbox.flush(force=True)
    notified, unsent = await svc.notifier.flush(force=True)
    delivered, remaining = delivered + notified, remaining + unsent
    payload = {**listing(svc), "delivered": delivered, "remaining": remaining}
    if not remaining:
        return call.reply(payload)
    errors = [e["last_error"] for e in payload["entries"] if e.get("last_error")]
    return p.Response(exit_code=p.EXIT_OPERATIONAL, payload=payload, error=(
        f"outbox flush: {delivered} delivered, {remaining} still queued"
        + (f" (last error: {' '.join(str(errors[-1]).split())})" if errors else "")))
