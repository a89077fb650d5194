"""health: the telemetry contract's health signals and QA per PR."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.health import health
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Health, svc: Services, call: Call) -> p.Response:
    return await call.use_case(health, write=False, batch_id=req.batch_id,
                               unanswered_after=req.unanswered_after,
                               first_heartbeat_grace=req.first_heartbeat_grace)
