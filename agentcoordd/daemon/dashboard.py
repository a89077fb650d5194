"""The read-only web dashboard the daemon serves on loopback (HTTP/1.1 via h11).

One page (`dashboard_static/`: vanilla JS and CSS, nothing fetched from
elsewhere) over a small JSON API:

    GET  /                       the page (carries this process's CSRF token)
    GET  /static/app.js|app.css  its assets
    GET  /api/overview           batches and lanes (coord.overview), claims, heartbeats
    GET  /api/batch?batch_id=B   batch status, merged event history, stop state
    GET  /api/health[?batch_id=B]  coord.health payload
    GET  /api/history[?batch_id=B&limit=N]  merged Store + local JSONL history
    GET  /api/search?q=Q         lanes by PR/issue number, branch, thread handle
    GET  /api/feed?batch_id=B[&from=end]  server-sent events: the batch's live event feed
                                 (the daemon's shared source, daemon/feed.py); each
                                 event's SSE id is its cursor, so a reconnecting
                                 EventSource resumes after Last-Event-ID
    POST /api/import             {launch_prompt, dry_run?, replace?} -> batches/<id>.json
    POST /api/stop               {batch_id, message?} -> one batch.stop_requested event
    POST /api/answer             {batch_id, to_event, message, decision?, agent_id?} -> one
                                 help_answered / escalation_answered event (coord.answers,
                                 the use case of `agentcoordctl answer`)
    GET  /metrics                the daemon's Prometheus metrics (docs/metrics.md)
    GET  /login?token=T          the token as a cookie, then a redirect to /

Protections:

* only the daemon's own user gets in (dashboard_auth.py): on Linux the client
  socket's uid (the kernel's socket table) must be the daemon's, checked before
  anything is read; and every request but `/login` must carry the user's
  token (cookie or `Authorization: Bearer`); otherwise 403 / 401;
* it binds loopback addresses only, and every request must come from an
  allowed peer (default: 127.0.0.0/8 and ::1; `allowed_peers` narrows it)
  and name this server in `Host` (127.0.0.1 / localhost / [::1] with its
  port — a DNS-rebinding page cannot read the API); otherwise 403;
* its connections are bounded (dashboard_slots.py): past the limit a
  newcomer takes the slot of the longest-waiting idle or slow connection, or
  gets 503 with Retry-After; event streams have a share of their own;
* the writes additionally need `Origin` equal to this server's own
  origin, `Sec-Fetch-Site` (when sent) `same-origin`, a JSON body, and the
  per-process CSRF token (embedded in the page, sent back in the
  `X-Agentcoord-CSRF` header; compared in constant time); otherwise 403/415;
* the import writes `batches/<id>.json` only (through `register_batch`, which
  validates it; an existing manifest is replaced only with `replace: true`),
  the stop request appends one ordinary event only (`telemetry.request_stop`),
  the answer appends one answer event only (`answers.answer`, which checks that
  the request exists): none kills, releases, or edits anything else. A body
  that is not what the route takes is a 400 with a one-line JSON error.

Responses are `no-store` with a strict Content-Security-Policy.

`metrics_only=True` is the opt-in scrape listener (agentcoordd --metrics-open):
`/metrics` for any local user without the token, every other path 404.
"""

from __future__ import annotations

import contextlib
import http
import importlib.resources
import inspect
import ipaddress
import json
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.abc
import h11
import msgspec
from anyio.abc import SocketAttribute

from agentcoordd.coord import answers as answers_mod
from agentcoordd.coord import batches as batches_mod
from agentcoordd.coord import health as health_mod
from agentcoordd.coord import overview as overview_mod
from agentcoordd.coord import prompt as prompt_mod
from agentcoordd.coord import status as status_mod
from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Clock, Ctx, ViewsSeen
from agentcoordd.daemon import dashboard_auth
from agentcoordd.daemon.dashboard_slots import REQUEST_TIMEOUT, RETRY_AFTER_SECONDS, Slot, Slots
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError, UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.model.timefmt import format_ts

CSRF_HEADER = "x-agentcoord-csrf"
MAX_BODY_BYTES = 512 * 1024
MAX_PROMPT_BYTES = 192 * 1024
DEFAULT_REFRESH_SECONDS = 5
MAX_LINGERING = 16  # refusals of other users that wait for their request at once
FEED_KEEPALIVE = 15.0  # an idle event stream sends a comment this often (and notices a gone client)
STATIC_FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or []


def _busy(what: str) -> HttpError:
    return HttpError(503, f"dashboard: {what}; retry shortly",
                     [("retry-after", str(RETRY_AFTER_SECONDS))])


def _unauthenticated() -> HttpError:
    return HttpError(401, "dashboard: not signed in: open the URL `agentcoordctl dashboard` "
                     "prints, or send `Authorization: Bearer <token>` (the token file it names)",
                     [("www-authenticate", 'Bearer realm="agentcoordd"')])


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def peer_allowed(peer: str, networks: Iterable[Any] = LOOPBACK_NETWORKS) -> bool:
    """True when the peer address lies in one of `networks` (default: loopback)."""
    address = _address(peer)
    if address is None:
        return False
    nets = [ipaddress.ip_network(n, strict=False) if isinstance(n, str) else n for n in networks]
    return any(address.version == net.version and address in net for net in nets)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def _json(data: Any) -> bytes:
    return msgspec.json.encode(data)


class Dashboard:
    """The dashboard server. `store_factory()` returns the Store to read (may be awaitable).

    `token`: the secret every request must carry (cookie or bearer; a random one when
    None). `owner_uid`: the only uid whose client sockets are served (None: no uid
    check, e.g. where the kernel has no socket table). `metrics_only`: the opt-in
    open scrape listener (no token, no uid check, `/metrics` only)."""

    def __init__(
        self,
        store_factory: Callable[[], Any],
        clock: Clock,
        identity: Identity | None = None,
        *,
        allowed_peers: Iterable[str] | None = None,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        on_stop_requested: Callable[[str], None] | None = None,
        metrics: Callable[[], tuple[str, bytes]] | None = None,
        on_events: Callable[[list[tuple[str, dict[str, Any]]]], Awaitable[None]] | None = None,
        feed: Callable[[str, Any, bool], Any] | None = None,
        token: str | None = None,
        owner_uid: int | None = None,
        metrics_only: bool = False,
        slots: Slots | None = None,
        seen: ViewsSeen | None = None,
    ) -> None:
        self.store_factory = store_factory
        self.seen = seen  # the daemon's fleet gauges: what the page's views told
        self.metrics = metrics  # (content type, exposition) for GET /metrics
        # feed(batch_id, after, from_end): `async with` a daemon.feed.Follower (None: no /api/feed).
        self.feed = feed
        # Told the batch id after a stop request was written (the daemon's stop-notice cache).
        self.on_stop_requested = on_stop_requested
        # Given the events a write of the page made (the daemon's notifications).
        self.on_events = on_events
        self.clock = clock
        self.identity = identity or Identity()
        self.allowed_networks = (
            tuple(ipaddress.ip_network(n, strict=False) for n in allowed_peers)
            if allowed_peers is not None
            else LOOPBACK_NETWORKS
        )
        for net in self.allowed_networks:
            if not net.is_loopback:  # allowed_peers can only narrow loopback
                raise UsageError(f"dashboard peers must be loopback addresses, not {net}")
        self.refresh_seconds = refresh_seconds
        self.csrf_token = secrets.token_urlsafe(32)
        self.token = token or secrets.token_urlsafe(32)
        self.owner_uid = owner_uid
        self.metrics_only = metrics_only
        self.slots = slots or Slots()
        self.refused_peers = 0
        self.failed_connections = 0
        self._lingering = 0
        self.host: str | None = None
        self.port: int | None = None

    # ---- serving ---------------------------------------------------------------

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def login_url(self) -> str:
        """The URL that signs a browser in (the token as a cookie) and shows the page."""
        return f"{self.url}login?token={self.token}"

    @property
    def cookie_name(self) -> str:
        # Cookies are not kept per port: one per port keeps two daemons' apart.
        return f"agentcoord_{self.port}"

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on a loopback `host`:`port` (0 = any free port) until cancelled;
        `task_status.started(port)` reports the bound port."""
        if not is_loopback_host(host):
            raise UsageError(f"the dashboard serves loopback addresses only, not {host}")
        bind = "127.0.0.1" if host == "localhost" else host
        listener = await anyio.create_tcp_listener(local_host=bind, local_port=port, backlog=1024)
        async with listener:
            self.host = bind
            self.port = listener.extra(SocketAttribute.local_port)
            task_status.started(self.port)
            await listener.serve(self._connection)

    def _origins(self) -> set[str]:
        """This server's own origins: the loopback names with the bound port."""
        port = self.port
        names = {"127.0.0.1", "localhost", "[::1]"}
        if self.host:
            names.add(f"[{self.host}]" if ":" in self.host else self.host)
        return {f"http://{name}:{port}" for name in names}

    def _hosts(self) -> set[str]:
        return {o.removeprefix("http://") for o in self._origins()}

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        try:
            remote = stream.extra(SocketAttribute.remote_address)
            local = stream.extra(SocketAttribute.local_address)
        except Exception:
            remote = local = None
        try:
            if not self._peer_is_owner(local, remote):  # before a slot: another user holds none
                await self._refuse_peer(stream)
                return
            slot = self.slots.admit()
            if slot is None:
                await _refuse(stream, _busy(f"{self.slots.limit} connections are being served"))
                return
            try:
                with slot.scope:  # cancelled when a newcomer takes this (waiting) slot
                    await self._serve_connection(stream, slot, str(remote[0]) if remote else "")
                if slot.scope.cancelled_caught:  # a client that was about to send gets told
                    await _refuse(stream, _busy("the server was full; this idle connection was closed"))
            finally:
                self.slots.release(slot)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
                h11.LocalProtocolError, TimeoutError, OSError):
            pass
        except Exception:  # noqa: BLE001 - the boundary: one connection never ends the server
            self.failed_connections += 1
        finally:
            await stream.aclose()

    async def _refuse_peer(self, stream: anyio.abc.SocketStream) -> None:
        """403 to another user's connection. It lingers a moment for the request (so the
        answer is not lost to a reset), unless many already do: a flood is cut short."""
        self.refused_peers += 1
        lingering = 1 if self._lingering < MAX_LINGERING else 0
        self._lingering += lingering
        try:
            await _refuse(stream, HttpError(403, "dashboard: the connection is not from the "
                                                 "daemon's user; run your own agentcoordd"),
                          linger=1.0 if lingering else 0.0)
        finally:
            self._lingering -= lingering

    def describe(self) -> dict[str, Any]:
        """For `daemon status`: where it listens and what it refused."""
        return {"url": self.url, "open": len(self.slots.open), "streams": self.slots.streams,
                "refused_busy": self.slots.refused, "evicted_idle": self.slots.evicted,
                "refused_other_users": self.refused_peers, "failed": self.failed_connections}

    async def _serve_connection(self, stream: anyio.abc.SocketStream, slot: Slot, peer: str) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=32 * 1024)
        while True:
            slot.waiting()
            try:
                with anyio.fail_after(REQUEST_TIMEOUT):
                    request, body = await self._read(stream, conn)
            except HttpError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(stream, conn, exc.status, *self._error(exc.message), close=True)
                return
            if request is None:
                return
            slot.serving()
            if request.method == b"GET" and urlsplit(
                    request.target.decode("latin-1")).path == "/api/feed":
                await self._feed_stream(stream, conn, request, peer, slot)
                return  # a stream ends its connection
            status, ctype, payload, headers = await self._respond(request, body, peer)
            await self._send(stream, conn, status, ctype, payload, headers=headers)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    def _peer_is_owner(self, local: Any, remote: Any) -> bool:
        if self.owner_uid is None or self.metrics_only:
            return True
        if local is None or remote is None:
            return False
        # Inline: one netlink round trip (~10 µs), no thread to queue behind in a flood.
        return dashboard_auth.peer_uid(local, remote) == self.owner_uid

    async def _read(self, stream: Any, conn: h11.Connection) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise HttpError(400, f"bad request: {exc}") from None
            if event is h11.NEED_DATA:
                try:
                    data = await stream.receive(65536)
                except anyio.EndOfStream:
                    data = b""
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
                length = dict(event.headers).get(b"content-length")
                if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
                    raise HttpError(413, "request body too large")
            elif isinstance(event, h11.Data):
                body.extend(event.data)
                if len(body) > MAX_BODY_BYTES:
                    raise HttpError(413, "request body too large")
            elif isinstance(event, h11.EndOfMessage):
                return request, bytes(body)
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None, b""

    async def _send(self, stream: Any, conn: h11.Connection, status: int, ctype: str,
                    payload: bytes, *, close: bool = False,
                    headers: list[tuple[str, str]] | None = None) -> None:
        data = conn.send(h11.Response(status_code=status, headers=_headers(
            ctype, payload, close=close, extra=headers), reason=_reason(status)))
        data += conn.send(h11.Data(data=payload))
        data += conn.send(h11.EndOfMessage())
        await stream.send(data)

    # ---- routing ------------------------------------------------------------------

    @staticmethod
    def _error(message: str) -> tuple[str, bytes]:
        return "application/json", _json({"error": message})

    async def _respond(self, request: h11.Request, body: bytes,
                       peer: str) -> tuple[int, str, bytes, list[tuple[str, str]]]:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        method = request.method.decode("ascii", "replace")
        target = urlsplit(request.target.decode("latin-1"))
        query = {k: v[-1] for k, v in parse_qs(target.query).items()}
        try:
            self._guard(headers, peer)
            if method == "GET" and target.path == "/login" and not self.metrics_only:
                return self._login(query.get("token"))
            self._authenticate(headers, target.path)
            if method == "POST" and not self.metrics_only:
                self.check_write(headers)
                data = self._body(body)
                if target.path == "/api/import":
                    result = await self.import_prompt(data)
                    return 201 if result["written"] else 200, *self._ok(result), []
                if target.path == "/api/stop":
                    return 201, *self._ok(await self.request_stop(data)), []
                if target.path == "/api/answer":
                    return 201, *self._ok(await self.answer_request(data)), []
                raise HttpError(404, "not found")
            if method != "GET":
                raise HttpError(405, "method not allowed")
            return *await self._get(target.path, query), []
        except HttpError as exc:
            return exc.status, *self._error(exc.message), exc.headers
        except UsageError as exc:
            return 400, *self._error(exc.message), []
        except CoordError as exc:
            return 503, *self._error(exc.message), []
        except Exception as exc:  # never take the server down with one request
            return 500, *self._error(f"internal error: {type(exc).__name__}"), []

    def _guard(self, headers: dict[str, str], peer: str) -> None:
        """Every request: an allowed loopback peer naming this server in Host."""
        if not peer_allowed(peer, self.allowed_networks):
            raise HttpError(403, f"dashboard: peer {peer or '?'} is not an allowed loopback client")
        if headers.get("host") not in self._hosts():
            raise HttpError(403, "dashboard: unexpected Host header")

    def _authenticate(self, headers: dict[str, str], path: str) -> None:
        """Every request but /login carries the token: the page's cookie, or a bearer
        (Prometheus, scripts). The open scrape listener serves /metrics only."""
        if self.metrics_only:
            if path != "/metrics":
                raise HttpError(404, "not found (this listener serves /metrics only)")
            return
        offered = headers.get("authorization", "")
        if offered[:7].lower() == "bearer ":
            offered = offered[7:].strip()
        else:
            offered = _cookie(headers.get("cookie", ""), self.cookie_name)
        if not dashboard_auth.token_matches(offered, self.token):
            raise _unauthenticated()

    def _login(self, offered: str | None) -> tuple[int, str, bytes, list[tuple[str, str]]]:
        if not dashboard_auth.token_matches(offered, self.token):
            raise _unauthenticated()
        cookie = f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        return 303, "text/plain; charset=utf-8", b"signed in\n", [
            ("location", "/"), ("set-cookie", cookie)]

    async def _feed_stream(self, stream: Any, conn: h11.Connection, request: h11.Request,
                           peer: str, slot: Slot) -> None:
        """GET /api/feed: server-sent events until the client goes away."""
        from agentcoordd.model import cursor as cur

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        query = {k: v[-1] for k, v in parse_qs(urlsplit(request.target.decode("latin-1")).query).items()}
        try:
            self._guard(headers, peer)
            self._authenticate(headers, "/api/feed")
            if self.feed is None:
                raise HttpError(404, "the live feed is served by agentcoordd's dashboard only")
            batch = query.get("batch_id") or ""
            after = headers.get("last-event-id") or query.get("after")
            try:
                ids.batch_id(batch)
                position = cur.decode(after) if after else cur.START
            except UsageError as exc:
                raise HttpError(400, exc.message) from None
            if not self.slots.start_stream(slot):
                raise _busy(f"{self.slots.stream_limit} event streams are open")
        except HttpError as exc:
            await self._send(stream, conn, exc.status, *self._error(exc.message), close=True,
                             headers=exc.headers)
            return
        from_end = not after and query.get("from") == "end"
        async with anyio.create_task_group() as tg:
            # The client sends nothing more: its end of the connection closing (or
            # anything it sends) ends the stream, and frees the slot, at once.
            tg.start_soon(_until_readable, stream, tg.cancel_scope)
            async with self.feed(batch, position, from_end) as follower:
                await stream.send(conn.send(h11.Response(status_code=200, reason=b"OK", headers=[
                    ("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-store"),
                    ("x-content-type-options", "nosniff"), ("content-security-policy", CSP)])))
                rows = await follower.backlog()
                while True:
                    chunk = b"".join(b"id: " + row["cursor"].encode("ascii") + b"\nevent: feed\ndata: "
                                     + _json(row) + b"\n\n" for row in rows)
                    await stream.send(conn.send(h11.Data(data=chunk or b": keepalive\n\n")))
                    rows = await follower.next(FEED_KEEPALIVE)

    @staticmethod
    def _ok(payload: Any) -> tuple[str, bytes]:
        return "application/json", _json(payload)

    def check_write(self, headers: dict[str, str]) -> None:
        """The write protections: same Origin, same-site fetch, CSRF token, JSON."""
        origin = headers.get("origin")
        if origin is None or origin not in self._origins():
            raise HttpError(403, "dashboard: write refused: foreign or missing Origin")
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            raise HttpError(403, "dashboard: write refused: cross-site request")
        token = headers.get(CSRF_HEADER, "")
        if not dashboard_auth.token_matches(token, self.csrf_token):
            raise HttpError(403, "dashboard: write refused: missing or wrong CSRF token")
        if not headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            raise HttpError(415, "dashboard: writes take application/json")

    @staticmethod
    def _body(body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise HttpError(400, "body is not valid JSON") from None
        if not isinstance(data, dict):
            raise HttpError(400, "body must be a JSON object")
        return data

    async def _ctx(self) -> Ctx:
        store = self.store_factory()
        if inspect.isawaitable(store):
            store = await store
        return Ctx(store=store, clock=self.clock, identity=self.identity, seen=self.seen)

    async def _get(self, path: str, query: dict[str, str]) -> tuple[int, str, bytes]:
        if path in ("/", "/index.html"):
            return 200, "text/html; charset=utf-8", self.page()
        if path.startswith("/static/"):
            name = path.removeprefix("/static/")
            if name not in STATIC_FILES:
                raise HttpError(404, "not found")
            return 200, STATIC_FILES[name], _static(name)
        if path == "/favicon.ico":
            return 204, "text/plain", b""
        if path == "/metrics":
            if self.metrics is None:
                raise HttpError(404, "metrics are off (agentcoordd --no-metrics)")
            return 200, *self.metrics()
        ctx = await self._ctx()
        batch = query.get("batch_id") or None
        if path == "/api/overview":
            return 200, *self._ok(await overview_mod.overview(ctx))
        if path == "/api/health":
            return 200, *self._ok(await health_mod.health(ctx, batch_id=batch))
        if path == "/api/history":
            limit = query.get("limit")
            if limit is not None and not limit.isdigit():
                raise HttpError(400, "limit must be a number")
            return 200, *self._ok(await telemetry.history(ctx, batch_id=batch, limit=int(limit) if limit else None))
        if path == "/api/batch":
            if batch is None:
                raise HttpError(400, "batch_id is required")
            ids.batch_id(batch)
            state = await status_mod.status(ctx, batch_id=batch, events=0)
            found = await telemetry.history(ctx, batch_id=batch, limit=2000)
            stop = await telemetry.stop_state(ctx, batch)
            return 200, *self._ok({"batch_id": batch, "status": state, "history": found, "stop": stop,
                                   "warnings": ctx.warnings})
        if path == "/api/search":
            data = await overview_mod.overview(ctx)
            return 200, *self._ok({"query": query.get("q", ""),
                                   "lanes": overview_mod.search(data["batches"], query.get("q", ""))})
        raise HttpError(404, "not found")

    def page(self) -> bytes:
        html = _static("index.html").decode("utf-8")
        html = html.replace("{{CSRF_TOKEN}}", self.csrf_token)
        html = html.replace("{{REFRESH_MS}}", str(int(self.refresh_seconds * 1000)))
        return html.encode("utf-8")

    # ---- the writes ---------------------------------------------------------------------

    async def import_prompt(self, data: dict[str, Any]) -> dict[str, Any]:
        """Save a retained manifest read from a pasted launch prompt (batches/<id>.json only)."""
        text = _field(data, "launch_prompt", required=True) or ""
        if len(text.encode("utf-8")) > MAX_PROMPT_BYTES or "\x00" in text:
            raise HttpError(400, "launch_prompt is too large or contains NUL")
        ctx = await self._ctx()
        try:
            manifest, warnings = prompt_mod.manifest_from_prompt(
                text, created_at=format_ts(ctx.clock.now()), created_by_machine=self.identity.machine_id
            )
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        batches_mod.validate_manifest(manifest)
        if data.get("dry_run"):
            return {"written": False, "batch_id": manifest["batch_id"], "manifest": manifest, "warnings": warnings}
        path = ids.batch_path(manifest["batch_id"])
        if await ctx.store.get(path) is not None and data.get("replace") is not True:
            raise HttpError(409, f"batch {manifest['batch_id']} already has a retained manifest "
                                 "(import again with replace to overwrite it)")
        written = await batches_mod.register_batch(ctx, manifest=_json(manifest))
        return {"written": True, "batch_id": written["batch_id"], "path": written["path"],
                "manifest": written["batch"], "warnings": warnings + ctx.warnings}

    async def request_stop(self, data: dict[str, Any]) -> dict[str, Any]:
        """Append batch.stop_requested for a batch (nothing else)."""
        batch = _field(data, "batch_id", required=True) or ""
        message = _field(data, "message")
        ctx = await self._ctx()
        written = await telemetry.request_stop(ctx, batch_id=batch, message=message)
        if self.on_stop_requested is not None:
            self.on_stop_requested(batch)
        return await self._written(ctx, written)

    async def answer_request(self, data: dict[str, Any]) -> dict[str, Any]:
        """Answer an open help/escalation request: `agentcoordctl answer`'s use case
        (one help_answered / escalation_answered event, stamped by this daemon)."""
        batch = _field(data, "batch_id", required=True) or ""
        request = _field(data, "to_event", required=True) or ""
        message = _field(data, "message", required=True) or ""
        ctx = await self._ctx()
        written = await answers_mod.answer(ctx, batch_id=batch, to_event=request, message=message,
                                           decision=_field(data, "decision"),
                                           agent_id=_field(data, "agent_id"))
        return await self._written(ctx, written)

    async def _written(self, ctx: Ctx, result: dict[str, Any]) -> dict[str, Any]:
        """A write's reply; the events it wrote go to the daemon's notifications."""
        if self.on_events is not None:
            await self.on_events(ctx.written)
        return {**result, "warnings": ctx.warnings}


def _field(data: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    """A text field of a write's JSON body: None when absent or blank (a 400 when
    `required`); a 400 when it is not a string."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise HttpError(400, f"{key} must be a string")
    if value is None or not value.strip():
        if required:
            raise HttpError(400, f"{key} is required")
        return None
    return value


def _static(name: str) -> bytes:
    return (importlib.resources.files("agentcoordd.daemon") / "dashboard_static" / name).read_bytes()


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _headers(ctype: str, payload: bytes, *, close: bool = False,
             extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    headers = [
        ("content-type", ctype),
        ("content-length", str(len(payload))),
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("content-security-policy", CSP),
        *(extra or []),
    ]
    if close:
        headers.append(("connection", "close"))
    return headers


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


async def _until_readable(stream: Any, scope: anyio.CancelScope) -> None:
    """Cancel `scope` once the client closes (or sends anything)."""
    try:
        await stream.receive(1)
    except Exception:  # noqa: BLE001 - closed, reset, or gone: all end the stream
        pass
    scope.cancel()


async def _refuse(stream: Any, error: HttpError, *, linger: float = 0.0) -> None:
    """Answer a connection the server will not serve, never waiting on it to read (it
    may be one of a flood): the response goes out with what the socket buffer takes.
    With `linger`, wait that long at most for the client to finish sending and close,
    so the answer is not lost to a reset (a refused peer, not a flood)."""
    payload = _json({"error": error.message})
    head = [f"HTTP/1.1 {error.status} {_reason(error.status).decode()}"]
    head += [f"{k}: {v}" for k, v in _headers("application/json", payload, close=True,
                                              extra=error.headers)]
    # The event loop's transport socket cannot send or receive itself: a duplicate can.
    with contextlib.suppress(OSError), socket.socket(
            fileno=os.dup(stream.extra(SocketAttribute.raw_socket).fileno())) as raw:
        raw.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload, socket.MSG_DONTWAIT)
        # Closing with unread input resets the connection before the peer reads the
        # answer: take what already arrived first.
        raw.recv(65536, socket.MSG_DONTWAIT)
        if linger:
            raw.shutdown(socket.SHUT_WR)
    if linger:
        with anyio.move_on_after(linger), contextlib.suppress(Exception):
            while await stream.receive(65536):
                pass
