"""Every request type and its one handler (agentcoordd/daemon/handlers/).

`dispatch` runs the handler within the caller's timeout and turns a CoordError
into the reply's exit code. The table is checked against the protocol when
this module is imported: a request without a handler fails the daemon's start
(and the suite), never a call.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from agentcoordd import protocol as p
from agentcoordd.daemon.call import Call, Progress
from agentcoordd.daemon.handlers import (
    answers,
    audit,
    batch,
    capacity,
    claim,
    claim_next,
    daemon,
    dashboard,
    doctor,
    fence,
    feed,
    gc,
    health,
    heartbeat,
    host_limits,
    lanes,
    outbox,
    overview,
    ready,
    record_event,
    register_batch,
    release,
    reservation,
    status,
    takeover,
    usage,
    waits,
)
from agentcoordd.daemon.services import Services
from agentcoordd.model.errors import CoordError

Handler = Callable[[Any, Services, Call], Awaitable[p.Response]]

HANDLERS: dict[type, Handler] = {
    p.Claim: claim.handle,
    p.Release: release.handle,
    p.Takeover: takeover.handle,
    p.FenceCheck: fence.handle,
    p.Heartbeat: heartbeat.handle,
    p.RecordEvent: record_event.handle,
    p.RegisterBatch: register_batch.handle,
    p.Status: status.handle,
    p.Overview: overview.handle,
    p.BatchAudit: audit.handle,
    p.Health: health.handle,
    p.Gc: gc.handle,
    p.UsageRecord: usage.handle,
    p.BatchStop: batch.handle_stop,
    p.BatchStopped: batch.handle_stopped,
    p.BatchBlock: batch.handle_block,
    p.BatchUnblock: batch.handle_unblock,
    p.BatchComplete: batch.handle_complete,
    p.WaitStopRequested: waits.handle_stop_requested,
    p.WaitUnblocked: waits.handle_unblocked,
    p.WaitAnswered: answers.handle_wait,
    p.Answer: answers.handle,
    p.Lanes: lanes.handle,
    p.LanesStop: lanes.handle_stop,
    p.OutboxList: outbox.handle,
    p.OutboxFlush: outbox.handle_flush,
    p.Doctor: doctor.handle,
    p.Dashboard: dashboard.handle,
    p.Version: daemon.handle_version,
    p.ConfigShow: daemon.handle_config,
    p.DaemonStatus: daemon.handle_status,
    p.DaemonStop: daemon.handle_stop,
    p.Events: feed.handle,
    p.Ready: ready.handle,
    p.ClaimNext: claim_next.handle,
    p.WaitReady: waits.handle_ready,
    p.CapacityProfileSet: capacity.handle_profile,
    p.CapacityInboxSet: capacity.handle_inbox,
    p.CapacityOccupancySet: capacity.handle_occupancy,
    p.CapacityShow: capacity.handle_show,
    p.Reserve: reservation.handle_reserve,
    p.ReservationSettle: reservation.handle_settle,
    p.ReservationShow: reservation.handle_show,
    p.LimitReport: host_limits.handle_report,
    p.LimitClear: host_limits.handle_clear,
    p.LimitList: host_limits.handle_list,
}
# Requests that report progress frames while they run.
WITH_PROGRESS = frozenset({p.Gc, p.Events})
# Leave the caller some time to receive and print the reply.
TIMEOUT_MARGIN = 0.25

_missing = set(p.REQUEST_TYPES) ^ set(HANDLERS)
if _missing:  # pragma: no cover - a broken build; tests/daemon/test_handlers.py shows it
    raise ImportError(f"request types without exactly one handler: {sorted(t.__name__ for t in _missing)}")


def wants_progress(request: Any) -> bool:
    return type(request) in WITH_PROGRESS


async def dispatch(request: Any, svc: Services, progress: Progress | None = None,
                   peer: tuple[int | None, int] | None = None) -> p.Response:
    call = Call(request, svc, progress, peer)
    handler = HANDLERS[type(request)]
    try:
        with anyio.fail_after(_budget(request.timeout)):
            try:
                return await handler(request, svc, call)
            finally:
                call.wrote()  # before the reply leaves: the caller's next poll sees its write
    except CoordError as exc:
        return p.Response(exit_code=exc.exit_code, error=exc.message, warnings=call.warnings,
                          notices=call.notices)
    except TimeoutError:
        return p.Response(
            exit_code=p.EXIT_OPERATIONAL, notices=call.notices, warnings=call.warnings,
            error=f"{p.CALL_TIMED_OUT} after {request.timeout:g}s; coordination "
            "state is UNKNOWN (the backend did not answer in time)",
        )


def _budget(timeout: float | None) -> float | None:
    """The caller's timeout minus a margin; None (no bound) without one."""
    if timeout is not None and math.isfinite(timeout) and timeout > 0:
        return max(timeout - TIMEOUT_MARGIN, 0.05)
    return None
