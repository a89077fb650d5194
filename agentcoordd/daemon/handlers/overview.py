"""overview: batches and lanes with machine, QA and stop state (`status --watch`)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.overview import overview
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Overview, svc: Services, call: Call) -> p.Response:
    return await call.use_case(overview, write=False)
