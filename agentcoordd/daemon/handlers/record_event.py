"""record-event: append an event (lane_closed: create-only, ends the agent's lane);
--queue-on-failure puts an event the backend cannot take in the outbox."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.events import record_event
from agentcoordd.coord.completion import complete_closed_batches
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.RecordEvent, svc: Services, call: Call) -> p.Response:
    resolved, ctx = await call.agent_write(req.agent_id)
    async with call.events_to_outbox(ctx, resolved):
        payload = await call.outcome(ctx, record_event(
            ctx, batch_id=req.batch_id, type=req.type, lane=req.lane, agent_id=req.agent_id,
            repo=req.repo, target=req.target, branch=req.branch, status=req.status,
            message=req.message, meta=req.meta, typed=dict(req.typed), terminal=req.terminal,
            pr_state=req.pr_state, evidence_url=req.evidence_url, workspace=req.workspace,
            queue_on_failure=req.queue_on_failure, fencing_token=req.fencing_token))
        await svc.stop_notices.annotate(req, ctx, resolved.key, payload, call.notices)
        await complete_closed_batches(ctx)  # the last lane closed: the completion report
        if req.type == "lane_closed" and req.agent_id:
            await svc.keeper.end(resolved, req.agent_id, "lane_closed")
    return call.reply(payload)
