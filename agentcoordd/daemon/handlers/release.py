"""release: plain, structured handoff, or terminal closeout (lane_closed, then
the release); the agent's keep-alive lane on that target ends with it."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.claims import release
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
            lane=req.lane))
        await svc.stop_notices.annotate(req, ctx, resolved.key, payload, call.notices)
        await svc.keeper.end(resolved, req.agent_id, "lane_closed" if req.terminal else "released",
                             repo=req.repo, target=req.target)
    return call.reply(payload)
