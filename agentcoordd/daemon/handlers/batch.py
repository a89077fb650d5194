"""batch stop / stopped: the batch's stop signals (never kill, never touch claims);
batch block / unblock: its blocker (coord/blockers.py); batch complete: its
completion report (coord/completion.py)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.blockers import block, unblock
from agentcoordd.coord.completion import complete
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


async def handle_block(req: p.BatchBlock, svc: Services, call: Call) -> p.Response:
    return await call.use_case(block, write=True, batch_id=req.batch_id, message=req.message,
                               decisions=req.decisions, recommended_reply=req.recommended_reply,
                               agent_id=req.agent_id)


async def handle_unblock(req: p.BatchUnblock, svc: Services, call: Call) -> p.Response:
    return await call.use_case(unblock, write=True, batch_id=req.batch_id, decision=req.decision,
                               message=req.message, agent_id=req.agent_id)


async def handle_complete(req: p.BatchComplete, svc: Services, call: Call) -> p.Response:
    return await call.use_case(complete, write=True, batch_id=req.batch_id, report=req.report)
