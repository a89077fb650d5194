"""outbox / outbox flush: events waiting for their backend; retry them now, with the
caller's own token for the entries queued for its backend."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.daemon import backends
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services
from agentcoordd.model.errors import CoordError


async def handle(req: p.OutboxList, svc: Services, call: Call) -> p.Response:
    return call.reply(svc.outbox.listing())


async def handle_flush(req: p.OutboxFlush, svc: Services, call: Call) -> p.Response:
    try:
        svc.credentials.learn(backends.resolve(req.selection, req.caller.env, req.caller.cwd))
    except CoordError:
        pass  # no usable selection in the caller's environment: flush with what is known
    delivered, remaining = await svc.outbox.flush(force=True)
    payload = {**svc.outbox.listing(), "delivered": delivered, "remaining": remaining}
    if not remaining:
        return call.reply(payload)
    errors = [e["last_error"] for e in payload["entries"] if e.get("last_error")]
    return p.Response(exit_code=p.EXIT_OPERATIONAL, payload=payload, error=(
        f"outbox flush: {delivered} delivered, {remaining} still queued"
        + (f" (last error: {' '.join(str(errors[-1]).split())})" if errors else "")))
