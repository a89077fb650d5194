"""claim: acquire or renew a lease; with --keep-alive also the lane's first
heartbeat and its registration for renewal by the daemon."""

from __future__ import annotations

from typing import Any

from agentcoordd import protocol as p
from agentcoordd.coord.claims import claim
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.heartbeats import heartbeat
from agentcoordd.coord.keepalive import Fence
from agentcoordd.coord.waits import blocked_claim_warnings
from agentcoordd.daemon import backends, keeper
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Claim, svc: Services, call: Call) -> p.Response:
    if req.keep_alive is not None:
        keeper.check_flags(req.keep_alive, keeper.lane_ttl(req.keep_alive, claim=True),
                           svc.leases.policy)
    resolved, ctx = await call.agent_write(req.agent_id)
    async with call.events_to_outbox(ctx, resolved):
        payload = await call.outcome(ctx, claim(
            ctx, agent_id=req.agent_id, repo=req.repo, target=req.target, batch_id=req.batch_id,
            branch=req.branch, ttl=req.ttl, meta=req.meta))
        await claimed(req, svc, call, resolved, ctx, payload)
    return call.reply(payload)


def token_notice(req: p.Claim | p.Takeover, payload: dict[str, Any], call: Call) -> None:
    """A new grant's fencing token, for a caller reading text (--json: claim.fencing_token)."""
    if not req.json_payload and payload["action"] != "renewed":
        call.notices.append(f"fencing token {payload['claim'].get('fencing_token')}: pass it to "
                            "what you write (--fencing-token, agentcoordctl fence check; "
                            "agentcoordctl docs fencing)")


async def claimed(req: p.Claim, svc: Services, call: Call, resolved: backends.Resolved, ctx: Ctx,
                  payload: dict[str, Any]) -> None:
    """What follows a claim (also `claim --next`'s): the stop notice, the blocked-lane
    warning, and with --keep-alive the lane's heartbeat and its renewal."""
    await svc.stop_notices.annotate(req, ctx, resolved.key, payload, call.notices)
    record = payload["claim"]
    token_notice(req, payload, call)
    if record.get("batch_id"):  # a blocked lane's claim succeeds, with a warning
        call.warnings.extend(await blocked_claim_warnings(
            ctx, record["batch_id"], req.repo, req.target, req.agent_id))
    if req.keep_alive is None:
        svc.keeper.refence(resolved, req.agent_id, record)
    else:
        ttl = keeper.lane_ttl(req.keep_alive, claim=True)
        # The lane's heartbeat, written now: renewal keeps it fresh from here.
        beat_ctx = Ctx(store=ctx.store, clock=ctx.clock, identity=ctx.identity)
        await call.outcome(beat_ctx, heartbeat(
            beat_ctx, agent_id=req.agent_id, repo=req.repo, target=req.target,
            batch_id=record.get("batch_id"), branch=record.get("branch"), ttl=ttl,
            meta=req.meta))
        ctx.undelivered.extend(beat_ctx.undelivered)
        ctx.written.extend(beat_ctx.written)  # its events notify too (daemon/notify.py)
        payload["keep_alive"] = await svc.keeper.register(
            req, resolved, ttl=ttl, repo=req.repo, target=req.target,
            batch_id=record.get("batch_id"), fence=Fence.of(record), warnings=call.warnings,
            notices=call.notices, lane=payload.get("lane"))
