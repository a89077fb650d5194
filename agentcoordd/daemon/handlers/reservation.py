"""reserve, reservation consume|release|show: short-lived all-or-nothing holds on lane
slots; a refusal exits 4 (RESERVATION_REFUSED) — coord/capacity.py, docs/capacity.md."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord import capacity
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle_reserve(req: p.Reserve, svc: Services, call: Call) -> p.Response:
    request = {"reservation_id": req.reservation_id, "capacity_profile_id": req.profile_id,
               "inbox_id": req.inbox_id, "batch_id": req.batch_id,
               "planning_attempt_id": req.planning_attempt_id, "owner_id": req.owner_id,
               "instance_id": req.instance_id, "lane_refs": req.lane_refs,
               "ttl_seconds": req.ttl_seconds}
    return await call.use_case(capacity.reserve, write=True, workspace=req.workspace,
                               request=request)


async def handle_settle(req: p.ReservationSettle, svc: Services, call: Call) -> p.Response:
    return await call.use_case(capacity.settle, write=True, workspace=req.workspace,
                               reservation_id=req.reservation_id, state=req.state,
                               owner_id=req.owner_id, instance_id=req.instance_id,
                               lane_refs=req.lane_refs)


async def handle_show(req: p.ReservationShow, svc: Services, call: Call) -> p.Response:
    return await call.use_case(capacity.show_reservation, write=False, workspace=req.workspace,
                               reservation_id=req.reservation_id)
