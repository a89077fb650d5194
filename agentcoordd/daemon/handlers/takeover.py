"""takeover --force --reason TEXT: an operator takes a target from any holder, on the
record (coord.claims.force_takeover); the displaced holder's keep-alive lane is fenced."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.claims import force_takeover
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.handlers.claim import token_notice
from agentcoordd.daemon.services import Services


async def handle(req: p.Takeover, svc: Services, call: Call) -> p.Response:
    resolved, ctx = await call.agent_write(req.agent_id)
    async with call.events_to_outbox(ctx, resolved):
        payload = await call.outcome(ctx, force_takeover(
            ctx, agent_id=req.agent_id, repo=req.repo, target=req.target, reason=req.reason,
            force=req.force, batch_id=req.batch_id, branch=req.branch, ttl=req.ttl, meta=req.meta))
        svc.keeper.refence(resolved, req.agent_id, payload["claim"])
        token_notice(req, payload, call)
    return call.reply(payload)
