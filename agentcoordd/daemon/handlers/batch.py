"""batch stop / batch stopped: the batch's stop signals (never kill, never touch claims)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.telemetry import mark_stopped, request_stop
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle_stop(req: p.BatchStop, svc: Services, call: Call) -> p.Response:
    response = await call.use_case(request_stop, write=True, batch_id=req.batch_id,
                                   message=req.message)
    svc.stop_notices.forget(req.batch_id)  # agents of this daemon see it on their next call
    return response


async def handle_stopped(req: p.BatchStopped, svc: Services, call: Call) -> p.Response:
    response = await call.use_case(mark_stopped, write=True, batch_id=req.batch_id,
                                   message=req.message)
    svc.stop_notices.forget(req.batch_id)
    return response
