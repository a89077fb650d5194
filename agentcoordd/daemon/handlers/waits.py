"""Daemon-side waits: until a batch has a stop request, until a lane is unblocked,
until some lane is ready.

A wait answers (timed_out, exit 2) before the caller's own timeout would cut
it off, and at once when the daemon stops (the next daemon answers).
"""

from __future__ import annotations

import math
from typing import Any

from agentcoordd import protocol as p
from agentcoordd.coord.ready import wait_until_ready
from agentcoordd.coord.telemetry import wait_until_stop_requested
from agentcoordd.coord.waits import wait_until_unblocked
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services

# Answer this long before the dispatcher's own deadline (request.timeout - margin).
WAIT_MARGIN = 0.5


def budget(r: p._Wait) -> dict[str, Any]:
    seconds = r.wait_seconds if r.wait_seconds is not None and math.isfinite(r.wait_seconds) else None
    if r.timeout is not None and math.isfinite(r.timeout) and r.timeout > 0:
        cap = r.timeout - WAIT_MARGIN
        seconds = cap if seconds is None else min(seconds, cap)
    poll = r.poll_seconds if math.isfinite(r.poll_seconds) and r.poll_seconds > 0 else 1.0
    return dict(poll_seconds=min(max(poll, 0.05), 60.0),
                timeout=None if seconds is None else max(seconds, 0.0))


async def handle_stop_requested(req: p.WaitStopRequested, svc: Services, call: Call) -> p.Response:
    return await call.use_case(wait_until_stop_requested, write=False, poll=True,
                               batch_id=req.batch_id, **budget(req))


async def handle_unblocked(req: p.WaitUnblocked, svc: Services, call: Call) -> p.Response:
    return await call.use_case(wait_until_unblocked, write=False, poll=True, shared_reads=True,
                               batch_id=req.batch_id, lane=req.lane, **budget(req))


async def handle_ready(req: p.WaitReady, svc: Services, call: Call) -> p.Response:
    return await call.use_case(wait_until_ready, write=False, poll=True, shared_reads=True,
                               shared_results=True, batch_id=req.batch_id, agent_id=req.agent_id,
                               **budget(req))
