"""claim --next: claim the first ready lane of a batch this agent may take (its own
lanes and pool lanes), then whatever an ordinary claim does after (keep-alive, ...)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.ready import claim_next
from agentcoordd.daemon import keeper
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.handlers import claim as claim_handler
from agentcoordd.daemon.services import Services


async def handle(req: p.ClaimNext, svc: Services, call: Call) -> p.Response:
    if req.keep_alive is not None:
        keeper.check_flags(req.keep_alive, keeper.lane_ttl(req.keep_alive, claim=True),
                           svc.leases.policy)
    resolved, ctx = await call.agent_write(req.agent_id)
    # Concurrent claim --next callers share their survey (its reads and the batch's
    # classification); the claim CAS does not.
    survey = call.context(resolved, shared_reads=True)
    async with call.events_to_outbox(ctx, resolved):
        payload = await call.outcome(ctx, claim_next(
            ctx, batch_id=req.batch_id, agent_id=req.agent_id, branch=req.branch, ttl=req.ttl,
            meta=req.meta, survey=survey, share=call.shared_results(resolved)))
        # From here it is the ordinary claim of the lane's target.
        taken = p.Claim(agent_id=req.agent_id, repo=payload["repo"], target=payload["target"],
                        batch_id=req.batch_id, branch=req.branch, ttl=req.ttl, meta=req.meta,
                        keep_alive=req.keep_alive, caller=req.caller, selection=req.selection,
                        timeout=req.timeout)
        await claim_handler.claimed(taken, svc, call, resolved, ctx, payload)
    return call.reply(payload)
