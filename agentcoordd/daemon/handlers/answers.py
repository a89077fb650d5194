"""answer: record the answer to a help/escalation request; wait until one is answered
(daemon-side, its reads shared between concurrent waiters like the other waits)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.answers import answer, wait_until_answered
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.handlers.waits import budget
from agentcoordd.daemon.services import Services


async def handle(req: p.Answer, svc: Services, call: Call) -> p.Response:
    resolved, ctx = await call.agent_write(req.agent_id)
    async with call.events_to_outbox(ctx, resolved):
        payload = await call.outcome(ctx, answer(
            ctx, batch_id=req.batch_id, to_event=req.to_event, message=req.message,
            decision=req.decision, agent_id=req.agent_id))
    return call.reply(payload)


async def handle_wait(req: p.WaitAnswered, svc: Services, call: Call) -> p.Response:
    return await call.use_case(wait_until_answered, write=False, poll=True, shared_reads=True,
                               batch_id=req.batch_id, event_id=req.event_id, **budget(req))
