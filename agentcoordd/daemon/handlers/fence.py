"""fence check: is a fencing token the target's current grant? exit 0 current, 3
superseded, 2 when the claim cannot be read (docs/fencing.md)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.lease import fence_state
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.FenceCheck, svc: Services, call: Call) -> p.Response:
    resolved = call.backend(write=False)
    ctx = call.context(resolved)
    payload = await call.outcome(ctx, fence_state(ctx, req.repo, req.target, req.token))
    if payload["state"] != "current":
        payload.update(exit_code=p.EXIT_OPERATIONAL if payload["state"] == "unknown"
                       else p.EXIT_CLAIM_REFUSED, exit_error=payload["detail"])
    return call.reply(payload)
