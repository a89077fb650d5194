"""One request in the daemon: the caller's backend, the use case's context, and
what the reply carries besides the payload (warnings, notices, events to queue).

A handler reads top to bottom: `backend()`, `context()`, then its use case in
`events_to_outbox(...)` (events the backend did not take are queued durably
before the reply), then `reply()`. A plain read or write is `use_case(...)`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import msgspec

from agentcoordd import protocol as p
from agentcoordd.coord.common import WireData
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon import backends
from agentcoordd.daemon.services import Services
from agentcoordd.model.identity import resolve_identity



class ClientGone(Exception):
    """The client of a streaming request stopped reading (closed its end)."""


class Progress(Protocol):
    """Where a long request's interim frames go (dispatch's WITH_PROGRESS requests)."""

    def __call__(self, frame: p.Progress) -> None:
        """Best effort: dropped when the client lags (gc progress)."""
        ...

    async def send(self, frame: p.Progress) -> None:
        """Every frame, in order, waiting while the client lags (the event feed);
        raises ClientGone once the client stopped reading."""
        ...


class ProgressChannel:
    """A Progress over a memory stream that the server forwards to the client."""

    def __init__(self, sender: Any) -> None:
        self._sender = sender

    def __call__(self, frame: p.Progress) -> None:
        try:
            self._sender.send_nowait(frame)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async def send(self, frame: p.Progress) -> None:
        try:
            await self._sender.send(frame)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise ClientGone() from None


class Call:
    def __init__(self, request: Any, svc: Services, progress: Progress | None = None,
                 peer: tuple[int | None, int] | None = None) -> None:
        self.request = request
        self.svc = svc
        self.progress = progress
        self.peer = peer  # (pid, uid) of the connection, from the socket (None: in-process)
        self.notices: list[str] = []
        self.warnings: list[str] = []
        self._writes: list[backends.Resolved] = []  # backends this call may have written

    def backend(self, *, write: bool, status_read: bool = False) -> backends.Resolved:
        """The caller's backend (DESIGN.md "Backend selection"); its token is learned
        for the outbox and resumed lanes (memory only). `status_read`: agent-coord's
        status-style reads (AGENT_COORD_STATUS_STATE_ROOT, the read split-brain warning)."""
        caller = self.request.caller
        resolved = backends.resolve(self.request.selection, caller.env, caller.cwd, write=write,
                                    status_read=status_read)
        self.svc.credentials.learn(resolved)
        self.notices.extend(resolved.notices)
        self.warnings.extend(resolved.warnings)
        if write:
            self._writes.append(resolved)
        return resolved

    def wrote(self) -> None:
        """The call is done (its writes, if any, are finished): this daemon's pollers no
        longer answer from reads made before them (read your writes)."""
        for resolved in self._writes:
            self.svc.shared_reads.forget(self.svc.pool.get(resolved))

    def shared_results(self, resolved: backends.Resolved) -> Any:
        """`share(key, compute)` of the backend's shared-reads view: concurrent pollers of
        one question (a batch's `ready` classification) share one answer per tick."""
        return self.svc.shared_reads.reads_of(self.svc.pool.get(resolved)).results.share

    def context(self, resolved: backends.Resolved, *, shared_reads: bool = False) -> Ctx:
        store = self.svc.pool.get(resolved)
        if shared_reads:
            store = self.svc.shared_reads.reads_of(store)
        identity = resolve_identity(self.request.caller.env, fallback_machine=resolved.machine_id)
        return Ctx(store=store, clock=self.svc.clock, identity=identity, stamps=self.svc.stamps,
                   lease=self.svc.leases.policy, seen=self.svc.metrics.fleet)

    async def agent_write(self, agent_id: str | None) -> tuple[backends.Resolved, Ctx]:
        """The backend and context of an agent's write; the call touches the agent's
        keep-alive lane (idle timer, fence warning) before anything is written."""
        resolved = self.backend(write=True)
        ctx = self.context(resolved)
        await self.svc.keeper.touch(resolved, agent_id, self.warnings)
        return resolved, ctx

    async def outcome(self, ctx: Ctx, work: Awaitable[Any]) -> Any:
        """The use case's payload as wire data; its warnings join the reply's (also when it fails)."""
        try:
            result = await work
            return result if isinstance(result, WireData) else msgspec.to_builtins(result)
        finally:
            self.warnings.extend(ctx.warnings)
            ctx.warnings.clear()

    @contextlib.asynccontextmanager
    async def events_to_outbox(self, ctx: Ctx, resolved: backends.Resolved) -> AsyncIterator[None]:
        """Undeliverable lifecycle events go to the durable outbox, and notifications of
        the command's events to theirs, before any reply. Either failing to reach the
        daemon's state dir makes the command exit 2 (durable.StateDirError), after both
        were tried."""
        try:
            yield
        finally:
            self.warnings.extend(ctx.warnings)
            ctx.warnings.clear()
            # Written and queued events alike: this daemon's writes notify.
            try:
                await self.svc.notifier.notice(ctx.written + ctx.undelivered)
            finally:
                ctx.written.clear()
                await self.svc.outbox.queue(ctx.undelivered, resolved)

    def actor(self, identity: Any) -> dict[str, Any]:
        """Who made this call, as the daemon knows it (coord.trust: recorded when a
        caller acts for another agent): the socket's uid and pid, the machine, the session."""
        pid, uid = self.peer if self.peer is not None else (self.request.caller.pid, None)
        return {k: v for k, v in (("uid", uid), ("pid", pid), ("machine_id", identity.machine_id),
                                  ("session_id", identity.session_id)) if v is not None}

    def reply(self, payload: Any, exit_code: int = 0) -> p.Response:
        error = None
        if isinstance(payload, dict) and isinstance(payload.get("exit_code"), int):
            exit_code = payload.pop("exit_code")  # a use case that reports its own (batch-audit)
            error = payload.pop("exit_error", None)  # and, with it, why it failed (status)
        return p.Response(exit_code=exit_code, payload=payload, error=error, warnings=self.warnings,
                          notices=self.notices)

    async def use_case(self, function: Callable[..., Awaitable[Any]], *, write: bool,
                       shared_reads: bool = False, poll: bool = False, status_read: bool = False,
                       shared_results: bool = False, **kwargs: Any) -> p.Response:
        """A use case that needs nothing but its context: resolve, run, reply
        (`shared_results`: it also gets `share=`, see shared_results())."""
        resolved = self.backend(write=write, status_read=status_read)
        ctx = self.context(resolved, shared_reads=shared_reads)
        if shared_results:
            kwargs["share"] = self.shared_results(resolved)
        async with self.events_to_outbox(ctx, resolved):
            work = function(ctx, **kwargs)
            payload = await self.outcome(ctx, self.svc.pollers.run(work) if poll else work)
        return self.reply(payload)
