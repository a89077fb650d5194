"""capacity profile|inbox|occupancy set and capacity show: the inputs of admission
(coord/capacity.py, docs/capacity.md)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord import capacity
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle_profile(req: p.CapacityProfileSet, svc: Services, call: Call) -> p.Response:
    return await call.use_case(capacity.set_profile, write=True, workspace=req.workspace,
                               profile_id=req.profile_id, max_concurrency=req.max_concurrency,
                               enabled=req.enabled)


async def handle_inbox(req: p.CapacityInboxSet, svc: Services, call: Call) -> p.Response:
    return await call.use_case(capacity.set_inbox, write=True, workspace=req.workspace,
                               inbox_id=req.inbox_id, profile_id=req.profile_id,
                               enabled=req.enabled)


async def handle_occupancy(req: p.CapacityOccupancySet, svc: Services, call: Call) -> p.Response:
    return await call.use_case(capacity.set_occupancy, write=True, workspace=req.workspace,
                               lane_ref=req.lane_ref, profile_id=req.profile_id,
                               inbox_id=req.inbox_id, state=req.state, reason=req.reason)


async def handle_show(req: p.CapacityShow, svc: Services, call: Call) -> p.Response:
    return await call.use_case(capacity.show_capacity, write=False, workspace=req.workspace,
                               profile_id=req.profile_id)
