"""`agentcoordctl dashboard`: the daemon's one loopback dashboard, started on demand.

The first `dashboard` request starts a `Dashboard` (agentcoordd/daemon/dashboard.py)
in the daemon's service task group, bound to 127.0.0.1 (`--port N`, else a free
port); later requests return the same URL. It lives until the daemon stops.

Which state it shows: the backend of the latest `dashboard` request, resolved
exactly like any other call (explicit flags, the caller's environment, the
machine's configured backend, the zero-config root). Resolved as a *write*
(an unusable consumer env file is exit 2), because its two writes — import a
manifest, request a stop — go to that backend. A later request for another
backend re-points the running dashboard and says so. Records it writes carry
the machine id only, never the session id of whoever ran `dashboard`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from agentcoordd import protocol as p
from agentcoordd.daemon import backends
from agentcoordd.model.errors import OperationalError, UsageError
from agentcoordd.model.identity import Identity, resolve_identity

if TYPE_CHECKING:
    from agentcoordd.daemon.dashboard import Dashboard
    from agentcoordd.daemon.dispatch import Dispatcher

HOST = "127.0.0.1"


class DashboardHost:
    def __init__(self) -> None:
        self.dashboard: Dashboard | None = None
        self.resolved: backends.Resolved | None = None
        self._lock = anyio.Lock()

    async def handle(self, d: Dispatcher, request: p.Dashboard) -> p.Response:
        port = request.port
        if port is not None and not 0 <= port <= 65535:
            raise UsageError(f"--port must be 0..65535: {port}")
        caller = request.caller
        resolved = backends.resolve(request.selection, caller.env, caller.cwd, write=True)
        identity = resolve_identity(caller.env, fallback_machine=resolved.machine_id)
        notices = list(resolved.notices)
        warnings = list(resolved.warnings)
        d.pool.get(resolved)  # open it now: a bad selection fails this call, not the page
        async with self._lock:
            previous = self.resolved
            self.resolved = resolved
            started = False
            if self.dashboard is None:
                self.dashboard = await self._start(d, port, identity)
                started = True
            else:
                if previous is not None and previous.key != resolved.key:
                    notices.append(f"agentcoordd: the dashboard now shows {resolved.kind} "
                                   f"{resolved.location} (was {previous.kind} {previous.location})")
                if port not in (None, 0, self.dashboard.port):
                    warnings.append(f"the dashboard is already serving on port {self.dashboard.port}; "
                                    f"--port {port} ignored (restart the daemon to change it)")
            self.dashboard.identity = Identity(machine_id=identity.machine_id)
        board = self.dashboard
        payload = {"url": board.url, "host": board.host, "port": board.port, "started": started,
                   "backend": resolved.describe()}
        return p.Response(exit_code=0, payload=payload, notices=notices, warnings=warnings)

    async def _start(self, d: Dispatcher, port: int | None, identity: Identity) -> Dashboard:
        from agentcoordd.daemon.dashboard import Dashboard

        services = getattr(d.daemon, "services", None)
        if services is None:
            raise OperationalError("agentcoordd is not serving yet; try again")

        def store() -> Any:
            assert self.resolved is not None
            return d.pool.get(self.resolved)

        board = Dashboard(store, d.clock, Identity(machine_id=identity.machine_id),
                          on_stop_requested=d.stop_notices.forget)
        try:
            await services.start(board.serve, HOST, port or 0)
        except OSError as exc:
            raise OperationalError(
                f"cannot serve the dashboard on {HOST}:{port or 0}: {exc.strerror or exc}") from None
        except RuntimeError:  # the service task group has closed: the daemon is stopping
            raise OperationalError("agentcoordd is stopping; the dashboard was not started") from None
        d.daemon.log.info("dashboard listening", url=board.url)
        return board
