"""release: plain, structured handoff, or terminal closeout (lane_closed, then
the release); the agent's keep-alive lane on that target ends with it. Another
machine's or session's claim needs --force, recorded with who did it (coord.trust)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.claims import release
from agentcoordd.coord.completion import complete_closed_batches
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Release, svc: Services, call: Call) -> p.Response:
    resolved, ctx = await call.agent_write(req.agent_id)
    async with call.events_to_outbox(ctx, resolved):
        payload = await call.outcome(ctx, release(
            ctx, agent_id=req.agent_id, repo=req.repo, target=req.target, branch=req.branch,
            meta=req.meta,
            handoff_to=req.handoff_to, handoff_note=req.handoff_note, terminal=req.terminal,
            pr_state=req.pr_state, evidence_url=req.evidence_url, workspace=req.workspace,
            lane=req.lane, fencing_token=req.fencing_token, force=req.force,
            actor=call.actor(ctx.identity)))
        await svc.stop_notices.annotate(req, ctx, resolved.key, payload, call.notices)
        await complete_closed_batches(ctx)  # the last lane closed: the completion report
        await svc.keeper.end(resolved, req.agent_id, "lane_closed" if req.terminal else "released",
                             repo=req.repo, target=req.target)
    return call.reply(payload)
