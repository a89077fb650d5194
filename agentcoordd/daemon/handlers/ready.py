"""ready: the lanes of a batch that can start now, and why the others cannot."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.ready import ready_lanes
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Ready, svc: Services, call: Call) -> p.Response:
    # Read exactly (not the pollers' shared view): `ready` right after one's own claim
    # or closeout must show it.
    return await call.use_case(ready_lanes, write=False, batch_id=req.batch_id,
                               agent_id=req.agent_id)
