"""`agentcoordctl dashboard`: the daemon's one loopback dashboard, started on demand.

The first `dashboard` request starts a `Dashboard` (agentcoordd/daemon/dashboard.py)
in the daemon's service task group, bound to 127.0.0.1 (`--port N`, else a free
port); later requests return the same URL. It lives until the daemon stops.

Which state it shows: the backend of the latest `dashboard` request, resolved
exactly like any other call (explicit flags, the caller's environment, the
machine's configured backend, the zero-config root). Resolved as a *write*
(an unusable consumer env file is exit 2), because its writes — import a
manifest, request a stop, answer a request — go to that backend. A later request for another
backend re-points the running dashboard and says so. Records it writes carry
the machine id only, never the session id of whoever ran `dashboard`.

`agentcoordd --metrics-port N` starts the same server at boot on 127.0.0.1:N,
for `/metrics` (docs/metrics.md); its pages answer 503 until a `dashboard`
request chooses the backend they show. With `--metrics-open` that port is
instead a listener of its own that serves `/metrics` only, to any local user,
and the dashboard gets a port of its own when asked for.

Only the daemon's user gets in (dashboard_auth.py): its token is read from (or
written to) the 0600 file beside the daemon's socket when the server starts,
and on Linux each connection's client socket must belong to the daemon's uid.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from agentcoordd.coord.context import Clock, ViewsSeen
from agentcoordd.daemon import backends, dashboard_auth
from agentcoordd.daemon.background import Background
from agentcoordd.model.errors import OperationalError
from agentcoordd.model.identity import Identity

if TYPE_CHECKING:
    from agentcoordd.daemon.dashboard import Dashboard
    from agentcoordd.daemon.feed import Feed
    from agentcoordd.daemon.stopnotice import StopNotices

HOST = "127.0.0.1"


class DashboardHost:
    """The one running dashboard, and which backend it shows."""

    def __init__(self, *, pool: backends.StorePool, clock: Clock, stop_notices: StopNotices,
                 background: Background, log: Any,
                 metrics: Callable[[], tuple[str, bytes]] | None = None,
                 on_events: Callable[[list[tuple[str, dict[str, Any]]]], Awaitable[None]]
                 | None = None, feed: Feed | None = None, token_file: Path | None = None,
                 metrics_open: bool = False, seen: ViewsSeen | None = None) -> None:
        self.pool = pool
        self.seen = seen  # the fleet gauges the dashboard's views feed (daemon/metrics.py)
        self.token_file = token_file  # beside the socket (None: a token per start, tests)
        self.metrics_open = metrics_open  # --metrics-open: /metrics on a listener of its own
        self.metrics_listener: Dashboard | None = None
        self.metrics = metrics  # the /metrics exposition; None with --no-metrics
        self.on_events = on_events  # events the dashboard wrote (notifications)
        self.feed = feed  # the live event feed its batch view streams (server-sent events)
        self.clock = clock
        self.stop_notices = stop_notices
        self.background = background
        self.log = log
        self.dashboard: Dashboard | None = None
        self.resolved: backends.Resolved | None = None
        self._lock = anyio.Lock()

    async def show(self, resolved: backends.Resolved, identity: Identity, port: int | None,
                   notices: list[str], warnings: list[str]) -> tuple[Dashboard, bool]:
        """Point the dashboard at `resolved`, starting it first if needed; (board, started)."""
        self.pool.get(resolved)  # open it now: a bad selection fails this call, not the page
        async with self._lock:
            previous = self.resolved
            self.resolved = resolved
            started = False
            if self.dashboard is None:
                self.dashboard = await self._start(port, identity)
                started = True
            else:
                if previous is not None and previous.key != resolved.key:
                    notices.append(f"agentcoordd: the dashboard now shows {resolved.kind} "
                                   f"{resolved.location} (was {previous.kind} {previous.location})")
                if port not in (None, 0, self.dashboard.port):
                    warnings.append(f"the dashboard is already serving on port {self.dashboard.port}; "
                                    f"--port {port} ignored (restart the daemon to change it)")
            self.dashboard.identity = Identity(machine_id=identity.machine_id)
            return self.dashboard, started

    def _token(self) -> str | None:
        if self.token_file is None:
            return None
        try:
            return dashboard_auth.load_or_create_token(self.token_file)
        except OSError as exc:
            raise OperationalError(f"cannot keep the dashboard token in {self.token_file}: "
                                   f"{exc.strerror or exc}") from None

    async def _start(self, port: int | None, identity: Identity) -> Dashboard:
        from agentcoordd.daemon.dashboard import Dashboard  # the web app: only once asked for

        def resolved() -> Any:
            if self.resolved is None:  # started by --metrics-port, no `dashboard` request yet
                raise OperationalError("the dashboard shows no backend yet: run "
                                       "`agentcoordctl dashboard` to choose the state it shows")
            return self.resolved

        def store() -> Any:
            return self.pool.get(resolved())

        def follow(batch_id: str, after: Any, from_end: bool) -> Any:
            from agentcoordd.coord.feed import Filters

            assert self.feed is not None
            chosen = resolved()
            return self.feed.follow(chosen.key, self.pool.get(chosen), batch_id,
                                    after, Filters(), from_end=from_end)

        board = Dashboard(store, self.clock, Identity(machine_id=identity.machine_id),
                          on_stop_requested=self.stop_notices.forget, metrics=self.metrics,
                          on_events=self.on_events, feed=follow if self.feed is not None else None,
                          token=self._token(), owner_uid=_owner_uid(), seen=self.seen)
        await self._listen(board, port)
        return board

    async def _listen(self, board: Dashboard, port: int | None) -> None:
        try:
            await self.background.start(board.serve, HOST, port or 0)
        except OSError as exc:
            raise OperationalError(
                f"cannot serve the dashboard on {HOST}:{port or 0}: {exc.strerror or exc}") from None
        except RuntimeError:  # the service task group has closed: the daemon is stopping
            raise OperationalError("agentcoordd is stopping; the dashboard was not started") from None
        self.log.info("metrics listening (open to local users)" if board.metrics_only
                      else "dashboard listening", url=board.url)

    def metrics_url(self) -> str | None:
        """Where /metrics is served now (None: no server yet, or --no-metrics)."""
        board = self.metrics_listener or self.dashboard
        if board is None or self.metrics is None or board.port is None:
            return None
        return f"{board.url}metrics"

    def describe(self) -> dict[str, Any] | None:
        """The loopback server's connections and refusals (`daemon status`)."""
        boards = [b for b in (self.dashboard, self.metrics_listener) if b is not None]
        return {"servers": [b.describe() for b in boards]} if boards else None

    def metrics_token_file(self) -> str | None:
        """The bearer token a scraper of metrics_url() sends (None: none needed or no server)."""
        if self.metrics_listener is not None or self.dashboard is None or self.token_file is None:
            return None
        return str(self.token_file)

    async def serve_at_start(self, port: int) -> None:
        """`--metrics-port`: the loopback server from the daemon's start (with
        `--metrics-open`, the open /metrics listener instead). A port that cannot be
        bound is logged; the daemon serves on without it."""
        from agentcoordd.daemon.dashboard import Dashboard

        async with self._lock:
            if self.dashboard is not None or self.metrics_listener is not None:
                return
            try:
                if self.metrics_open:
                    listener = Dashboard(_no_store, self.clock, metrics=self.metrics,
                                         metrics_only=True)
                    await self._listen(listener, port)
                    self.metrics_listener = listener
                else:
                    self.dashboard = await self._start(port, Identity())
            except OperationalError as exc:
                self.log.error("metrics endpoint not started", error=exc.message, port=port)


def _owner_uid() -> int | None:
    """Whose client sockets the dashboard serves: ours, where the kernel's socket
    table can tell (Linux); elsewhere the token alone decides."""
    return os.getuid() if dashboard_auth.socket_table_available() else None


def _no_store() -> Any:
    raise OperationalError("the open metrics listener serves /metrics only")
