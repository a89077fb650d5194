"""status: full, target-scoped or batch-scoped coordination state."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.status import status
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Status, svc: Services, call: Call) -> p.Response:
    return await call.use_case(status, write=False, status_read=True, repo=req.repo, target=req.target,
                               batch_id=req.batch_id, include_archived=req.include_archived,
                               events=req.events, all_events=req.all_events)
