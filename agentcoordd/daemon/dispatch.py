"""One handler per request type; CoordError becomes the response's exit code.

Store-backed commands are rows of `ROUTES`: which coord function to call, how
to build its keyword arguments from the request, and whether it writes (writes
are refused on an unusable consumer env file). Adding a command is adding a row.
Coord modules are imported on first use, so a use case that does not exist yet
is a clear exit 2 rather than a daemon that cannot start.
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from agentcoordd import protocol as p
from agentcoordd.coord.closeout import StampQueue
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon import backends
from agentcoordd.daemon.clock import SystemClock
from agentcoordd.daemon.credentials import Credentials
from agentcoordd.daemon.recent import RecentReads
from agentcoordd.model.errors import CoordError, OperationalError
from agentcoordd.model.identity import resolve_identity

if TYPE_CHECKING:
    from agentcoordd.daemon.server import Daemon

# Leave the caller some time to receive and print the reply.
TIMEOUT_MARGIN = 0.25


@dataclass(frozen=True)
class Route:
    module: str
    function: str
    kwargs: Callable[[Any], dict[str, Any]]
    write: bool
    progress: bool = False  # the use case takes a `progress(label, done, total)` callback
    poller: bool = False  # a read-only wait: ends (exit 2, retry) when the daemon stops
    shared_reads: bool = False  # its reads are shared for a moment with concurrent callers


def _claim(r: p.Claim) -> dict[str, Any]:
    return dict(agent_id=r.agent_id, repo=r.repo, target=r.target, batch_id=r.batch_id,
                branch=r.branch, ttl=r.ttl, meta=r.meta)


def _release(r: p.Release) -> dict[str, Any]:
    return dict(agent_id=r.agent_id, repo=r.repo, target=r.target, meta=r.meta,
                handoff_to=r.handoff_to, handoff_note=r.handoff_note, terminal=r.terminal,
                pr_state=r.pr_state, evidence_url=r.evidence_url, workspace=r.workspace)


def _heartbeat(r: p.Heartbeat) -> dict[str, Any]:
    return dict(agent_id=r.agent_id, repo=r.repo, target=r.target, batch_id=r.batch_id,
                branch=r.branch, status=r.status, ttl=r.ttl, meta=r.meta)


def _record_event(r: p.RecordEvent) -> dict[str, Any]:
    return dict(batch_id=r.batch_id, type=r.type, lane=r.lane, agent_id=r.agent_id, repo=r.repo,
                target=r.target, branch=r.branch, status=r.status, message=r.message, meta=r.meta,
                typed=dict(r.typed), terminal=r.terminal, pr_state=r.pr_state,
                evidence_url=r.evidence_url, workspace=r.workspace,
                queue_on_failure=r.queue_on_failure)


def _register_batch(r: p.RegisterBatch) -> dict[str, Any]:
    return dict(manifest=r.manifest, launch_prompt=r.launch_prompt, synthetic=r.synthetic,
                synthetic_kind=r.synthetic_kind)


def _status(r: p.Status) -> dict[str, Any]:
    return dict(repo=r.repo, target=r.target, batch_id=r.batch_id,
                include_archived=r.include_archived, events=r.events, all_events=r.all_events)


def _batch_audit(r: p.BatchAudit) -> dict[str, Any]:
    return dict(batch_id=r.batch_id)


def _gc(r: p.Gc) -> dict[str, Any]:
    return dict(execute=r.execute, hot_days=r.hot_days, archive_days=r.archive_days,
                synthetic_hot_days=r.synthetic_hot_days, prefixes=list(r.prefixes) or None)


def _batch_signal(r: p.BatchStop | p.BatchStopped) -> dict[str, Any]:
    return dict(batch_id=r.batch_id, message=r.message)


def _health(r: p.Health) -> dict[str, Any]:
    return dict(batch_id=r.batch_id)


def _overview(r: p.Overview) -> dict[str, Any]:
    return {}


# A daemon-side wait answers (timed_out, exit 2) this long before the
# dispatcher's own deadline (request.timeout - TIMEOUT_MARGIN) would cut it off.
WAIT_MARGIN = 0.5


def _wait_budget(r: p._Wait) -> dict[str, Any]:
    budget = r.wait_seconds if r.wait_seconds is not None and math.isfinite(r.wait_seconds) else None
    if r.timeout is not None and math.isfinite(r.timeout) and r.timeout > 0:
        cap = r.timeout - WAIT_MARGIN
        budget = cap if budget is None else min(budget, cap)
    poll = r.poll_seconds if math.isfinite(r.poll_seconds) and r.poll_seconds > 0 else 1.0
    return dict(poll_seconds=min(max(poll, 0.05), 60.0),
                timeout=None if budget is None else max(budget, 0.0))


def _wait_stop(r: p.WaitStopRequested) -> dict[str, Any]:
    return dict(batch_id=r.batch_id, **_wait_budget(r))


def _wait_unblocked(r: p.WaitUnblocked) -> dict[str, Any]:
    return dict(batch_id=r.batch_id, lane=r.lane, **_wait_budget(r))


ROUTES: dict[type, Route] = {
    p.Claim: Route("agentcoordd.coord.claims", "claim", _claim, write=True),
    p.Release: Route("agentcoordd.coord.claims", "release", _release, write=True),
    p.Heartbeat: Route("agentcoordd.coord.heartbeats", "heartbeat", _heartbeat, write=True),
    p.RecordEvent: Route("agentcoordd.coord.events", "record_event", _record_event, write=True),
    p.RegisterBatch: Route("agentcoordd.coord.batches", "register_batch", _register_batch,
                           write=True),
    p.Status: Route("agentcoordd.coord.status", "status", _status, write=False),
    p.BatchAudit: Route("agentcoordd.coord.audit", "batch_audit", _batch_audit, write=False),
    p.Gc: Route("agentcoordd.coord.gc", "gc", _gc, write=True, progress=True),
    p.BatchStop: Route("agentcoordd.coord.telemetry", "request_stop", _batch_signal, write=True),
    p.BatchStopped: Route("agentcoordd.coord.telemetry", "mark_stopped", _batch_signal, write=True),
    p.Health: Route("agentcoordd.coord.health", "health", _health, write=False),
    p.Overview: Route("agentcoordd.coord.overview", "overview", _overview, write=False),
    p.WaitStopRequested: Route("agentcoordd.coord.telemetry", "wait_until_stop_requested",
                               _wait_stop, write=False, poller=True),
    p.WaitUnblocked: Route("agentcoordd.coord.waits", "wait_until_unblocked", _wait_unblocked,
                           write=False, poller=True, shared_reads=True),
}


def wants_progress(request: Any) -> bool:
    route = ROUTES.get(type(request))
    return route is not None and route.progress


def _use_case(module: str, function: str) -> Callable[..., Awaitable[Any]]:
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError):
        raise OperationalError(
            f"command not available yet: {module}.{function} is not part of this agentcoordd build"
        ) from None


def _jsonable(payload: Any) -> Any:
    """Payloads are built-in types; Structs inside are converted for the wire."""
    import msgspec

    return msgspec.to_builtins(payload)


class Dispatcher:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.pool = backends.StorePool()
        self.clock = SystemClock()
        self.stamps = StampQueue()  # concurrent closeouts of a batch share one manifest write
        self.recent = RecentReads()  # concurrent waiters share their polls' reads
        self._pollers: set[anyio.CancelScope] = set()
        from agentcoordd.daemon.dashboard_host import DashboardHost
        from agentcoordd.daemon.stopnotice import StopNotices

        self.stop_notices = StopNotices()  # issue 11: stop requests reach agents
        self.dashboards = DashboardHost()
        from agentcoordd.daemon.keeper import LaneKeeper

        self.lanes = LaneKeeper(self, daemon.state_dir, log=daemon.log)
        from agentcoordd.daemon.delivery import Delivery

        self.credentials = Credentials()  # callers' tokens, in memory only
        self.delivery = Delivery(self, daemon.state_dir, self.credentials, log=daemon.log)
        self.outbox = self.delivery.outbox

    async def handle(self, request: Any,
                     progress: Callable[[p.Progress], None] | None = None) -> p.Response:
        notices: list[str] = []
        warnings: list[str] = []
        try:
            with _deadline(request.timeout):
                return await self._handle(request, notices, warnings, progress)
        except CoordError as exc:
            return p.Response(exit_code=exc.exit_code, error=exc.message, warnings=warnings,
                              notices=notices)
        except TimeoutError:
            return p.Response(
                exit_code=p.EXIT_OPERATIONAL, notices=notices, warnings=warnings,
                error=f"agentcoordd: command timed out after {request.timeout:g}s; coordination "
                "state is UNKNOWN (the backend did not answer in time)",
            )

    async def _handle(self, request: Any, notices: list[str], warnings: list[str],
                      progress: Callable[[p.Progress], None] | None) -> p.Response:
        local = LOCAL_HANDLERS.get(type(request))
        if local is not None:
            answer = await local(self, request)
            if isinstance(answer, p.Response):  # a handler that sets its own exit code (doctor)
                return answer
            return p.Response(exit_code=0, payload=answer)
        route = ROUTES.get(type(request))
        if route is None:
            raise OperationalError(f"command not available yet: {type(request).__name__}")
        caller = request.caller
        resolved = backends.resolve(request.selection, caller.env, caller.cwd, write=route.write)
        self.credentials.learn(resolved)
        notices.extend(resolved.notices)
        warnings.extend(resolved.warnings)
        function = _use_case(route.module, route.function)
        store = self.pool.get(resolved)
        if route.shared_reads:
            store = self.recent.reads_of(store)
        identity = resolve_identity(caller.env, fallback_machine=resolved.machine_id)
        ctx = Ctx(store=store, clock=self.clock, identity=identity, stamps=self.stamps)
        kwargs = route.kwargs(request)
        if route.progress and progress is not None:
            def report(label: str, done: int, total: int) -> None:
                progress(p.Progress(message=f"{label} {done}/{total}",
                                    data={"label": label, "done": done, "total": total}))

            kwargs["progress"] = report
        await self.lanes.before(request, resolved, warnings)  # keep-alive: touch, fence warning
        try:
            try:
                if route.poller:
                    payload = await self._poll(function(ctx, **kwargs))
                else:
                    payload = await function(ctx, **kwargs)
            finally:
                warnings.extend(ctx.warnings)
            payload = _jsonable(payload)
            exit_code = 0
            if isinstance(payload, dict) and isinstance(payload.get("exit_code"), int):
                exit_code = payload.pop("exit_code")
            if exit_code == 0:  # the lane's batch has a stop request: notice + stop_requested
                await self.stop_notices.annotate(request, ctx, resolved.key, payload, notices)
            await self.lanes.after(request, resolved, ctx, payload, exit_code, warnings, notices)
        finally:  # undeliverable events go to the durable outbox before any reply
            await self.delivery.queue(ctx.undelivered, resolved, warnings)
        return p.Response(exit_code=exit_code, payload=payload, warnings=warnings,
                          notices=notices)


    async def _poll(self, waiting: Awaitable[Any]) -> Any:
        """Run a wait; a daemon shutdown ends it at once instead of being held up by it."""
        with anyio.CancelScope() as scope:
            self._pollers.add(scope)
            try:
                return await waiting
            finally:
                self._pollers.discard(scope)
        raise OperationalError("agentcoordd is stopping; wait again (the next daemon answers)")

    def interrupt_pollers(self) -> None:
        """Shutdown: every running wait answers now (exit 2) so the drain is quick."""
        for scope in list(self._pollers):
            scope.cancel()


class _deadline:
    """anyio.fail_after with the caller's timeout (minus a margin), or no bound."""

    def __init__(self, timeout: float | None) -> None:
        self.scope = None
        if timeout is not None and math.isfinite(timeout) and timeout > 0:
            self.scope = anyio.fail_after(max(timeout - TIMEOUT_MARGIN, 0.05))

    def __enter__(self) -> None:
        if self.scope is not None:
            self.scope.__enter__()

    def __exit__(self, *exc: Any) -> bool | None:
        if self.scope is not None:
            return self.scope.__exit__(*exc)
        return None


# ---- commands the daemon answers itself ----------------------------------------


def _info(name: str) -> dict[str, Any]:
    try:
        return dict(getattr(importlib.import_module("agentcoordd.coord.info"), name)())
    except (ImportError, AttributeError):
        return {}


async def _version(d: Dispatcher, request: p.Version) -> dict[str, Any]:
    payload = _info("version_info")
    payload.update(d.daemon.describe_version())
    return payload


async def _config_show(d: Dispatcher, request: p.ConfigShow) -> dict[str, Any]:
    payload = _info("config_info")
    if not payload:
        raise OperationalError("command not available yet: agentcoordd.coord.info.config_info")
    return payload


async def _daemon_status(d: Dispatcher, request: p.DaemonStatus) -> dict[str, Any]:
    status = d.daemon.describe()
    status["backends"] = d.pool.describe()
    return status


async def _daemon_stop(d: Dispatcher, request: p.DaemonStop) -> dict[str, Any]:
    d.daemon.request_stop("daemon stop requested", caller_pid=request.caller.pid)
    return {"stopping": True, "pid": os.getpid(), "at": time.time()}


async def _lanes(d: Dispatcher, request: p.Lanes) -> dict[str, Any]:
    listing = d.lanes.listing(request.agent_id)
    await d.stop_notices.annotate_lanes(d, listing)  # issue 11: stop_requested per lane
    return listing


async def _lanes_stop(d: Dispatcher, request: p.LanesStop) -> dict[str, Any]:
    return {"stopped": await d.lanes.stop(request.agent_id)}


async def _outbox(d: Dispatcher, request: p.OutboxList) -> dict[str, Any]:
    return d.delivery.listing()


async def _outbox_flush(d: Dispatcher, request: p.OutboxFlush) -> p.Response:
    try:  # the caller's own token (or selection) serves the entries queued for its backend
        d.credentials.learn(backends.resolve(request.selection, request.caller.env,
                                             request.caller.cwd))
    except CoordError:
        pass  # no usable selection in the caller's environment: flush with what is known
    delivered, remaining = await d.delivery.flush(force=True)
    payload = {**d.delivery.listing(), "delivered": delivered, "remaining": remaining}
    if not remaining:
        return p.Response(exit_code=0, payload=payload)
    errors = [e["last_error"] for e in payload["entries"] if e.get("last_error")]
    return p.Response(exit_code=p.EXIT_OPERATIONAL, payload=payload, error=(
        f"outbox flush: {delivered} delivered, {remaining} still queued"
        + (f" (last error: {' '.join(str(errors[-1]).split())})" if errors else "")))


async def _doctor(d: Dispatcher, request: p.Doctor) -> p.Response:
    from agentcoordd.daemon.doctor import handle

    return await handle(d, request)


async def _dashboard(d: Dispatcher, request: p.Dashboard) -> p.Response:
    return await d.dashboards.handle(d, request)


LOCAL_HANDLERS: dict[type, Callable[[Dispatcher, Any], Awaitable[Any]]] = {
    p.Dashboard: _dashboard,
    p.Version: _version,
    p.ConfigShow: _config_show,
    p.DaemonStatus: _daemon_status,
    p.DaemonStop: _daemon_stop,
    p.Doctor: _doctor,
    p.Lanes: _lanes,
    p.LanesStop: _lanes_stop,
    p.OutboxList: _outbox,
    p.OutboxFlush: _outbox_flush,
}
