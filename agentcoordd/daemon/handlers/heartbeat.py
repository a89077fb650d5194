"""heartbeat: write heartbeats/<agent-id>.json; with --keep-alive register the
lane for renewal; a terminal status ends the agent's lane."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.heartbeats import heartbeat
from agentcoordd.daemon import keeper
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services
from agentcoordd.model.status import is_terminal


async def handle(req: p.Heartbeat, svc: Services, call: Call) -> p.Response:
    ttl = keeper.lane_ttl(req.keep_alive, claim=False, heartbeat_ttl=req.ttl) if req.keep_alive else 0
    if req.keep_alive is not None:
        keeper.check_flags(req.keep_alive, ttl, svc.leases.policy)
    resolved, ctx = await call.agent_write(req.agent_id)
    async with call.events_to_outbox(ctx, resolved):
        payload = await call.outcome(ctx, heartbeat(
            ctx, agent_id=req.agent_id, repo=req.repo, target=req.target, batch_id=req.batch_id,
            branch=req.branch, status=req.status, ttl=req.ttl, meta=req.meta,
            fencing_token=req.fencing_token))
        await svc.stop_notices.annotate(req, ctx, resolved.key, payload, call.notices)
        beat = payload["heartbeat"]
        if is_terminal(beat.get("status")):
            await svc.keeper.end(resolved, req.agent_id, "terminal")
            if req.keep_alive is not None:
                call.warnings.append(
                    f"keep-alive not registered: status {beat.get('status')} is terminal")
        elif req.keep_alive is not None:
            repo, target = beat.get("repo"), beat.get("target")
            fence = await svc.keeper.claim_fence(ctx, req.agent_id, repo, target)
            if isinstance(fence, str):  # another agent's claim: never renew a lane naming it
                call.warnings.append(
                    f"keep-alive not registered: {repo}#{target} is held by {fence}, not "
                    f"{req.agent_id}; claim it first (or heartbeat without --repo/--target)")
            else:
                payload["keep_alive"] = await svc.keeper.register(
                    req, resolved, ttl=ttl, repo=repo, target=target,
                    batch_id=beat.get("batch_id"), fence=fence, warnings=call.warnings,
                    notices=call.notices)
    return call.reply(payload)
